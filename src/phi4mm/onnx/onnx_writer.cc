// ModelWriter / Graph over onnx::ModelProto, external data streaming, and the checker wrapper.
#include "phi4mm/onnx/onnx_writer.h"

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <fstream>

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include "phi4mm/base/half.h"

namespace phi4mm::onnx_writer {

namespace {

constexpr uint64_t kAlign = 4096;

void SetType(onnx::ValueInfoProto* vi, const std::string& name, ElemType type, const std::vector<Dim>& dims) {
  vi->set_name(name);
  onnx::TypeProto_Tensor* t = vi->mutable_type()->mutable_tensor_type();
  t->set_elem_type(static_cast<int32_t>(type));
  onnx::TensorShapeProto* s = t->mutable_shape();
  for (const Dim& d : dims) {
    onnx::TensorShapeProto_Dimension* dim = s->add_dim();
    if (const int64_t* v = std::get_if<int64_t>(&d)) dim->set_dim_value(*v);
    else dim->set_dim_param(std::get<std::string>(d));
  }
}

size_t ElemSize(ElemType t) {
  switch (t) {
    case ElemType::kFloat:
    case ElemType::kInt32: return 4;
    case ElemType::kInt64: return 8;
    case ElemType::kFloat16: return 2;
    case ElemType::kUint8:
    case ElemType::kBool: return 1;
  }
  return 1;
}

void FillAttr(onnx::AttributeProto* a, const Attr& attr) {
  a->set_name(attr.name);
  if (const int64_t* i = std::get_if<int64_t>(&attr.value)) {
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(*i);
  } else if (const float* f = std::get_if<float>(&attr.value)) {
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(*f);
  } else if (const std::string* s = std::get_if<std::string>(&attr.value)) {
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(*s);
  } else if (const auto* is = std::get_if<std::vector<int64_t>>(&attr.value)) {
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t v : *is) a->add_ints(v);
  } else if (const auto* fs = std::get_if<std::vector<float>>(&attr.value)) {
    a->set_type(onnx::AttributeProto::FLOATS);
    for (float v : *fs) a->add_floats(v);
  } else {
    a->set_type(onnx::AttributeProto::GRAPH);
    a->mutable_g()->CopyFrom(*std::get<std::shared_ptr<onnx::GraphProto>>(attr.value));
  }
}

// A Constant node writing `out` into `g`; returns its (empty) value tensor to fill.
onnx::TensorProto* ConstantNode(onnx::GraphProto* g, const std::string& out) {
  onnx::NodeProto* n = g->add_node();
  n->set_name(out + "/node");
  n->set_op_type("Constant");
  n->add_output(out);
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  return a->mutable_t();
}

}  // namespace

void Graph::Input(const std::string& name, ElemType type, const std::vector<Dim>& dims) {
  SetType(proto_->add_input(), name, type, dims);
}

void Graph::Output(const std::string& name, ElemType type, const std::vector<Dim>& dims) {
  SetType(proto_->add_output(), name, type, dims);
}

std::vector<std::string> Graph::Node(const std::string& op, const std::vector<std::string>& inputs, int num_outputs,
                                     const std::vector<Attr>& attrs, const std::string& domain,
                                     const std::vector<std::string>& outputs) {
  onnx::NodeProto* n = proto_->add_node();
  const std::string name = writer_->Fresh(op);
  n->set_name(name);
  n->set_op_type(op);
  if (!domain.empty()) n->set_domain(domain);
  for (const std::string& in : inputs) n->add_input(in);
  std::vector<std::string> outs = outputs;
  if (outs.empty())
    for (int i = 0; i < num_outputs; ++i) outs.push_back(name + "/out" + std::to_string(i));
  for (const std::string& o : outs) n->add_output(o);
  for (const Attr& a : attrs) FillAttr(n->add_attribute(), a);
  return outs;
}

std::string Graph::Op(const std::string& op, const std::vector<std::string>& inputs, const std::vector<Attr>& attrs,
                      const std::string& domain) {
  return Node(op, inputs, 1, attrs, domain)[0];
}

std::string Graph::ConstInts(const std::vector<int64_t>& v, bool scalar) {
  const std::string out = writer_->Fresh("const_i64");
  onnx::TensorProto* t = ConstantNode(proto_, out);
  t->set_data_type(onnx::TensorProto::INT64);
  if (!scalar) t->add_dims(static_cast<int64_t>(v.size()));
  for (int64_t x : v) t->add_int64_data(x);
  return out;
}

std::string Graph::ConstFloats(const std::vector<float>& v, const std::vector<int64_t>& shape) {
  const std::string out = writer_->Fresh("const_f32");
  onnx::TensorProto* t = ConstantNode(proto_, out);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : shape) t->add_dims(d);
  for (float x : v) t->add_float_data(x);
  return out;
}

std::string Graph::ConstReal(const std::vector<float>& v, const std::vector<int64_t>& shape) {
  if (writer_->real_type() == ElemType::kFloat) return ConstFloats(v, shape);
  const std::string out = writer_->Fresh("const_f16");
  onnx::TensorProto* t = ConstantNode(proto_, out);
  t->set_data_type(onnx::TensorProto::FLOAT16);
  for (int64_t d : shape) t->add_dims(d);
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = F32ToF16(std::clamp(v[i], -65504.0f, 65504.0f));
  t->set_raw_data(h.data(), h.size() * sizeof(uint16_t));
  return out;
}

ModelWriter::ModelWriter() : model_(std::make_unique<onnx::ModelProto>()), main_(this, nullptr) {
  main_.proto_ = model_->mutable_graph();
}

ModelWriter::~ModelWriter() {
  if (data_ != nullptr) std::fclose(data_);
}

Result<std::unique_ptr<ModelWriter>> ModelWriter::Create(const std::string& dir, const std::string& file_name,
                                                         const std::string& graph_name, ElemType real) {
  if (real != ElemType::kFloat && real != ElemType::kFloat16)
    return Internal("a model's real type must be float32 or float16");
  std::unique_ptr<ModelWriter> w(new ModelWriter());
  w->real_ = real;
  w->dir_ = dir;
  w->model_path_ = dir + "/" + file_name;
  w->data_name_ = file_name + ".data";
  w->data_path_ = dir + "/" + w->data_name_;
  w->data_ = std::fopen(w->data_path_.c_str(), "wb");
  if (w->data_ == nullptr)
    return InvalidArgument("cannot create '" + w->data_path_ + "': " + std::strerror(errno));
  onnx::ModelProto& m = *w->model_;
  m.set_ir_version(kIrVersion);
  m.set_producer_name("phi4mm");
  m.set_producer_version("export");
  onnx::OperatorSetIdProto* def = m.add_opset_import();
  def->set_domain("");
  def->set_version(kOpsetDefault);
  onnx::OperatorSetIdProto* ms = m.add_opset_import();
  ms->set_domain(kMsDomain);
  ms->set_version(kOpsetMicrosoft);
  m.mutable_graph()->set_name(graph_name);
  return w;
}

std::pair<std::shared_ptr<onnx::GraphProto>, Graph> ModelWriter::Subgraph(const std::string& name) {
  auto g = std::make_shared<onnx::GraphProto>();
  g->set_name(Fresh(name));
  subgraphs_.push_back(g);
  return {g, Graph(this, g.get())};
}

std::string ModelWriter::Fresh(const std::string& prefix) { return prefix + "_" + std::to_string(counter_++); }

Status ModelWriter::AddFloat(const std::string& name, const float* data, const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return AddBytes(name, ElemType::kFloat, data, n * sizeof(float), shape);
}

Status ModelWriter::AddReal(const std::string& name, const float* data, const std::vector<int64_t>& shape) {
  if (real_ == ElemType::kFloat) return AddFloat(name, data, shape);
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  std::vector<uint16_t> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = F32ToF16(data[i]);
  return AddBytes(name, ElemType::kFloat16, h.data(), n * sizeof(uint16_t), shape);
}

Status ModelWriter::AddBytes(const std::string& name, ElemType type, const void* data, size_t nbytes,
                             const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  if (n * ElemSize(type) != nbytes)
    return Internal("initializer '" + name + "': " + std::to_string(nbytes) + " bytes for " + std::to_string(n) +
                    " elements");
  if (data_ == nullptr) return Internal("initializer '" + name + "' added after Save()");
  onnx::TensorProto* t = model_->mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(static_cast<int32_t>(type));
  for (int64_t d : shape) t->add_dims(d);
  if (nbytes < kExternalMinBytes) {
    t->set_raw_data(data, nbytes);
    return Status::Ok();
  }
  const uint64_t offset = (data_offset_ + kAlign - 1) / kAlign * kAlign;
  static const char kZeros[kAlign] = {};
  if (offset > data_offset_ && std::fwrite(kZeros, 1, offset - data_offset_, data_) != offset - data_offset_)
    return DataLoss("writing '" + data_path_ + "' failed: " + std::strerror(errno));
  if (nbytes > 0 && std::fwrite(data, 1, nbytes, data_) != nbytes)
    return DataLoss("writing '" + data_path_ + "' failed (disk full?): " + std::strerror(errno));
  data_offset_ = offset + nbytes;
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const char* k, const std::string& v) {
    onnx::StringStringEntryProto* e = t->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  add("location", data_name_);
  add("offset", std::to_string(offset));
  add("length", std::to_string(nbytes));
  return Status::Ok();
}

Status ModelWriter::Save() {
  if (data_ == nullptr) return Internal("'" + model_path_ + "' was saved already");
  const bool closed = std::fclose(data_) == 0;
  data_ = nullptr;
  if (!closed) return DataLoss("closing '" + data_path_ + "' failed: " + std::strerror(errno));
  std::ofstream out(model_path_, std::ios::binary | std::ios::trunc);
  if (!out) return InvalidArgument("cannot create '" + model_path_ + "'");
  if (!model_->SerializeToOstream(&out) || !out.flush())
    return DataLoss("writing '" + model_path_ + "' failed (a model over 2 GiB without external data, or disk full)");
  return Status::Ok();
}

Status CheckModelFile(const std::string& path) {
  try {
    onnx::checker::check_model(path);
  } catch (const std::exception& e) {
    return InvalidArgument("onnx::checker rejects '" + path + "': " + e.what());
  }
  try {
    onnx::ModelProto m;
    std::ifstream in(path, std::ios::binary);
    if (!in || !m.ParseFromIstream(&in)) return InvalidArgument("cannot parse '" + path + "' as an ONNX model");
    onnx::ShapeInferenceOptions opts(/*check_type=*/true, /*strict_mode=*/1, /*data_prop=*/false);
    onnx::shape_inference::InferShapes(m, onnx::OpSchemaRegistry::Instance(), opts);
  } catch (const std::exception& e) {
    return InvalidArgument("ONNX shape inference rejects '" + path + "': " + e.what());
  }
  return Status::Ok();
}

}  // namespace phi4mm::onnx_writer
