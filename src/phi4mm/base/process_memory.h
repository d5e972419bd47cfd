// This process's memory as the operating system reports it: resident set, its peak, and the
// memory-mapped file pages (the weights) with the share the kernel maps in 2 MiB pages. Read by the
// benchmarks and the server's metrics. Linux figures come from /proc/self; where a file or field is
// absent (other systems, older kernels) the figure is 0.
#pragma once

#include <cstdint>

namespace phi4mm {

// Resident set size now, in bytes (/proc/self/status VmRSS).
int64_t ResidentBytes();
// The largest resident set size so far, in bytes (getrusage ru_maxrss).
int64_t PeakResidentBytes();

// The file-backed pages this process has resident (the memory-mapped weights) and how many of
// those bytes are mapped in 2 MiB pages (/proc/self/status RssFile, /proc/self/smaps_rollup
// FilePmdMapped). Decode runs measurably slower over weights held in 4 KiB pages
// (docs/benchmarks.md, "Weights in huge pages").
struct FilePages {
  int64_t resident = 0, huge = 0;
};
FilePages MappedFilePages();

}  // namespace phi4mm
