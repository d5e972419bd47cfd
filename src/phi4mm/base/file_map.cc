// POSIX mmap-backed FileMap and small-file helpers. Files of 2 MiB and more are mapped at a 2 MiB
// boundary with transparent huge pages requested (base/huge_pages.h), so a weight file can sit in
// the TLB in 2 MiB entries.
#include "phi4mm/base/file_map.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

#include "phi4mm/base/huge_pages.h"

namespace phi4mm {

Result<std::shared_ptr<const FileMap>> FileMap::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return NotFound("file '" + path + "' does not exist");
    return InvalidArgument("cannot open '" + path + "': " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument("'" + path + "' is not a regular file");
  }
  std::shared_ptr<FileMap> map(new FileMap());
  map->path_ = path;
  map->size_ = static_cast<size_t>(st.st_size);
  if (map->size_ > 0) {
    void* p = MapHugeAligned(map->size_, fd);
    if (p == nullptr) p = ::mmap(nullptr, map->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return InvalidArgument("cannot memory-map '" + path + "': " + std::strerror(err));
    }
    map->data_ = static_cast<const uint8_t*>(p);
    // Decode reads every weight once per token. With this advice the kernel reads the file in
    // whole 2 MiB folios when our accesses fault it in (kernels with large folios for the
    // filesystem), and maps them with one entry each; elsewhere it is a hint that costs nothing.
    AdviseHugePages(p, map->size_);
  }
  ::close(fd);
  return std::shared_ptr<const FileMap>(std::move(map));
}

FileMap::~FileMap() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void AdviseUnneeded(const void* data, size_t size) {
  const long page = ::sysconf(_SC_PAGESIZE);
  if (page <= 0 || data == nullptr) return;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + size) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

Result<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (!FileExists(path)) return NotFound("file '" + path + "' does not exist");
    return InvalidArgument("cannot read '" + path + "'");
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool FileExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

}  // namespace phi4mm
