// A read-only memory-mapped file. Checkpoint tensors are views into these mappings, so weights are
// paged in lazily by the OS and shared between all sessions of a model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "phi4mm/base/status.h"

namespace phi4mm {

class FileMap {
 public:
  static Result<std::shared_ptr<const FileMap>> Open(const std::string& path);
  ~FileMap();
  FileMap(const FileMap&) = delete;
  FileMap& operator=(const FileMap&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  FileMap() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Tells the OS that the pages fully inside [data, data + size) of a read-only file mapping are no
// longer needed (after their tensor was converted into an owned buffer): they leave the resident
// set, and are read from the file again only if touched again.
void AdviseUnneeded(const void* data, size_t size);

// Reads a whole (small) file into a string: configs, JSON, text.
Result<std::string> ReadFileToString(const std::string& path);
bool FileExists(const std::string& path);
// "dir/name" with exactly one separator.
std::string JoinPath(const std::string& dir, const std::string& name);

}  // namespace phi4mm
