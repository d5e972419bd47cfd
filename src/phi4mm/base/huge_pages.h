// Memory mappings placed for transparent huge pages: a region of 2 MiB or more mapped at a 2 MiB
// boundary (so its huge folios can each be mapped with one page-table entry), and the advice that
// asks the kernel for them. Used for the memory-mapped weight files and for the weight buffers
// converted at load; decode reads all of them once per token, and with 4 KiB pages the TLB misses
// cost it 15-20% (docs/benchmarks.md, "Weights in huge pages").
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace phi4mm {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Maps `size` bytes at a 2 MiB-aligned address: the file `fd` from offset 0, read-only and
// private, or (fd < 0) anonymous zeroed read-write memory. Returns nullptr when `size` is under
// 2 MiB or the address space cannot be had (errno says why); the caller then maps the ordinary
// way. Release with munmap(p, size).
void* MapHugeAligned(size_t size, int fd);

// madvise(MADV_HUGEPAGE) where the system has it: the kernel backs the range with 2 MiB pages
// when it can (anonymous memory; file pages on kernels with large folios for the filesystem).
// A hint: failure changes nothing.
void AdviseHugePages(void* p, size_t size);

// Zero-initialised owned storage of `bytes`: whole 2 MiB pages at a 2 MiB boundary with huge pages
// advised when it is 2 MiB or more, else (or when the system refuses the mapping) from the heap.
std::shared_ptr<uint8_t[]> AllocateHugeAligned(size_t bytes);

}  // namespace phi4mm
