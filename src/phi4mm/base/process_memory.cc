// ResidentBytes, PeakResidentBytes and MappedFilePages from /proc/self and getrusage.
#include "phi4mm/base/process_memory.h"

#include <sys/resource.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace phi4mm {

namespace {

// The value of the line "<key>: <n> kB" of a /proc file, in bytes; 0 when the file or line is absent.
int64_t ProcKb(const char* path, const std::string& key) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line))
    if (line.compare(0, key.size() + 1, key + ":") == 0) return std::atoll(line.c_str() + key.size() + 1) * 1024;
  return 0;
}

}  // namespace

int64_t ResidentBytes() { return ProcKb("/proc/self/status", "VmRSS"); }

int64_t PeakResidentBytes() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

FilePages MappedFilePages() {
  return {ProcKb("/proc/self/status", "RssFile"), ProcKb("/proc/self/smaps_rollup", "FilePmdMapped")};
}

}  // namespace phi4mm
