// A small layer over Debian's ONNX library (libonnx-dev, the protobuf classes of onnx.proto) for
// writing models: graphs with typed inputs/outputs (fixed or symbolic dimensions), nodes with
// attributes and subgraphs, and initializers whose bytes are streamed at once into one external
// data file next to the model (each tensor aligned to 4 KiB so ORT can map it), so a model of many
// gigabytes is written without holding its weights in memory. Models are IR 8 with the default
// domain at opset 17 and com.microsoft 1: what the Debian checker (onnx 1.12) can check.
// Each model has a "real" type, float32 or float16: the element type of its float inputs,
// outputs, weights and constants, so one builder writes both the fp32 and the fp16 package
// (AddReal/ConstReal convert; AddFloat/ConstFloats stay float32 whatever the model computes in).
// CheckModelFile runs onnx::checker and shape inference on a written file.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "phi4mm/base/status.h"

namespace onnx {
class AttributeProto;
class GraphProto;
class ModelProto;
}  // namespace onnx

namespace phi4mm::onnx_writer {

inline constexpr int64_t kOpsetDefault = 17;
inline constexpr int64_t kOpsetMicrosoft = 1;
inline constexpr int64_t kIrVersion = 8;
inline constexpr const char* kMsDomain = "com.microsoft";

// TensorProto.DataType values used here.
enum class ElemType : int32_t { kFloat = 1, kUint8 = 2, kInt32 = 6, kInt64 = 7, kBool = 9, kFloat16 = 10 };

// TensorProto.DataType of `t`, for Cast's `to` attribute.
inline int64_t TensorTypeId(ElemType t) { return static_cast<int64_t>(t); }

// A dimension: fixed (>= 0) or symbolic ("batch_size").
using Dim = std::variant<int64_t, std::string>;

// One node attribute.
struct Attr {
  std::string name;
  std::variant<int64_t, float, std::string, std::vector<int64_t>, std::vector<float>,
               std::shared_ptr<onnx::GraphProto>>
      value;
  static Attr Int(std::string n, int64_t v) { return {std::move(n), v}; }
  static Attr Float(std::string n, float v) { return {std::move(n), v}; }
  static Attr String(std::string n, std::string v) { return {std::move(n), std::move(v)}; }
  static Attr Ints(std::string n, std::vector<int64_t> v) { return {std::move(n), std::move(v)}; }
  static Attr Graph(std::string n, std::shared_ptr<onnx::GraphProto> g) { return {std::move(n), std::move(g)}; }
};

class ModelWriter;

// A graph being built: the main graph of a ModelWriter or a subgraph (an If branch). Value names
// are unique per writer: Node() derives output names from the node name.
class Graph {
 public:
  void Input(const std::string& name, ElemType type, const std::vector<Dim>& dims);
  void Output(const std::string& name, ElemType type, const std::vector<Dim>& dims);
  // A node; returns its output names (`num_outputs` of them, "<name>/out<i>", unless `outputs`
  // names them: an empty string there leaves that optional output unused).
  std::vector<std::string> Node(const std::string& op, const std::vector<std::string>& inputs, int num_outputs = 1,
                                const std::vector<Attr>& attrs = {}, const std::string& domain = "",
                                const std::vector<std::string>& outputs = {});
  // Node() with one output, returned.
  std::string Op(const std::string& op, const std::vector<std::string>& inputs, const std::vector<Attr>& attrs = {},
                 const std::string& domain = "");
  // Small constants stored inside the graph (shape vectors, scalars).
  std::string ConstInts(const std::vector<int64_t>& v, bool scalar = false);
  std::string ConstFloats(const std::vector<float>& v, const std::vector<int64_t>& shape);
  // A constant of the model's real type; float16 saturates at ±65504 (so a -1e30 mask bias stays finite).
  std::string ConstReal(const std::vector<float>& v, const std::vector<int64_t>& shape);

  onnx::GraphProto* proto() { return proto_; }
  ModelWriter* writer() { return writer_; }

 private:
  friend class ModelWriter;
  Graph(ModelWriter* w, onnx::GraphProto* g) : writer_(w), proto_(g) {}
  ModelWriter* writer_;
  onnx::GraphProto* proto_;
};

class ModelWriter {
 public:
  // A model to be saved as `dir/<file_name>` with its external data in `dir/<file_name>.data`
  // (opened now, so initializers can be streamed into it).
  // `real` is kFloat or kFloat16.
  static Result<std::unique_ptr<ModelWriter>> Create(const std::string& dir, const std::string& file_name,
                                                     const std::string& graph_name,
                                                     ElemType real = ElemType::kFloat);
  ~ModelWriter();
  ModelWriter(const ModelWriter&) = delete;
  ModelWriter& operator=(const ModelWriter&) = delete;

  Graph& graph() { return main_; }
  // An empty subgraph (for an If branch); attach it with Attr::Graph.
  std::pair<std::shared_ptr<onnx::GraphProto>, Graph> Subgraph(const std::string& name);
  // A unique value name with this prefix.
  std::string Fresh(const std::string& prefix);

  // Initializers of the main graph. Tensors of at least kExternalMinBytes go to the data file.
  Status AddFloat(const std::string& name, const float* data, const std::vector<int64_t>& shape);
  // As AddFloat, stored in the model's real type (float16 rounds to nearest even).
  Status AddReal(const std::string& name, const float* data, const std::vector<int64_t>& shape);
  Status AddBytes(const std::string& name, ElemType type, const void* data, size_t nbytes,
                  const std::vector<int64_t>& shape);
  static constexpr size_t kExternalMinBytes = 1024;

  // Writes the model file and closes the data file. Call once.
  Status Save();
  const std::string& model_path() const { return model_path_; }
  const std::string& data_path() const { return data_path_; }
  uint64_t external_bytes() const { return data_offset_; }
  ElemType real_type() const { return real_; }

 private:
  ModelWriter();
  std::unique_ptr<onnx::ModelProto> model_;
  Graph main_;
  std::string dir_, model_path_, data_path_, data_name_;
  std::FILE* data_ = nullptr;
  uint64_t data_offset_ = 0;
  int64_t counter_ = 0;
  ElemType real_ = ElemType::kFloat;
  std::vector<std::shared_ptr<onnx::GraphProto>> subgraphs_;
};

// onnx::checker::check_model on the file (external data resolved next to it) and strict shape
// inference; the error says which check failed and why.
Status CheckModelFile(const std::string& path);

}  // namespace phi4mm::onnx_writer
