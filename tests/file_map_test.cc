// FileMap: a file of 2 MiB and more is mapped at a 2 MiB boundary (so its huge page-cache folios
// can be mapped whole) and reads back byte for byte, smaller and empty files map as before, and
// missing files and directories give clear errors. MapHugeAligned's anonymous memory and
// AllocateHugeAligned's buffers (the weights converted at load) are aligned, zeroed and writable;
// the process-memory figures see them.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <sys/mman.h>

#include "phi4mm/base/file_map.h"
#include "phi4mm/base/huge_pages.h"
#include "phi4mm/base/process_memory.h"

namespace phi4mm {
namespace {

std::string WriteFile(const std::string& name, size_t size) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::vector<char> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 13);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(size));
  return path;
}

void ExpectContents(const FileMap& map, size_t size) {
  ASSERT_EQ(map.size(), size);
  for (size_t i = 0; i < size; i += 4093) ASSERT_EQ(map.data()[i], static_cast<uint8_t>((i * 2654435761u) >> 13)) << i;
  if (size > 0) {
    EXPECT_EQ(map.data()[size - 1], static_cast<uint8_t>(((size - 1) * 2654435761u) >> 13));
  }
}

TEST(FileMap, LargeFilesMapOnHugePageBoundaries) {
  // Not a multiple of the page size, so the mapping's last page is partial.
  for (size_t size : {size_t{2} << 20, (size_t{5} << 20) + 12345}) {
    const std::string path = WriteFile("phi4mm_file_map_large.bin", size);
    {
      auto map = FileMap::Open(path);
      ASSERT_TRUE(map.ok()) << map.status().ToString();
      EXPECT_EQ(reinterpret_cast<uintptr_t>((*map)->data()) % (uintptr_t{2} << 20), 0u);
      ExpectContents(**map, size);
      // A second mapping of the same file is its own, equally aligned.
      auto again = FileMap::Open(path);
      ASSERT_TRUE(again.ok());
      EXPECT_NE((*again)->data(), (*map)->data());
      EXPECT_EQ(reinterpret_cast<uintptr_t>((*again)->data()) % (uintptr_t{2} << 20), 0u);
      ExpectContents(**again, size);
    }
    std::remove(path.c_str());
  }
}

TEST(FileMap, SmallAndEmptyFiles) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{4096}, size_t{100000}}) {
    const std::string path = WriteFile("phi4mm_file_map_small.bin", size);
    auto map = FileMap::Open(path);
    ASSERT_TRUE(map.ok()) << map.status().ToString();
    ExpectContents(**map, size);
    std::remove(path.c_str());
  }
}

TEST(FileMap, MissingFileAndDirectoryAreClearErrors) {
  auto missing = FileMap::Open((std::filesystem::temp_directory_path() / "phi4mm_no_such_file.bin").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().ToString().find("does not exist"), std::string::npos);
  auto dir = FileMap::Open(std::filesystem::temp_directory_path().string());
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().ToString().find("not a regular file"), std::string::npos);
}

TEST(HugePages, AnonymousMemoryIsAlignedZeroedAndWritable) {
  EXPECT_EQ(MapHugeAligned(kHugePageBytes - 1, -1), nullptr);  // under 2 MiB: the caller's heap
  const size_t size = 3 * kHugePageBytes;
  const int64_t before = ResidentBytes();
  auto* p = static_cast<uint8_t*>(MapHugeAligned(size, -1));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u);
  AdviseHugePages(p, size);
  for (size_t i = 0; i < size; i += 4096) ASSERT_EQ(p[i], 0) << i;
  for (size_t i = 0; i < size; ++i) p[i] = static_cast<uint8_t>(i * 7);
  for (size_t i = 0; i < size; i += 4093) ASSERT_EQ(p[i], static_cast<uint8_t>(i * 7)) << i;
  // Touching all of it made it resident (Linux reports VmRSS; other systems report 0).
  const int64_t during = ResidentBytes();
  if (before > 0) {
    EXPECT_GE(during - before, static_cast<int64_t>(size) / 2);
    // The kernel's RSS counters lag by a few pages, so the peak is checked against what was touched.
    EXPECT_GE(PeakResidentBytes(), static_cast<int64_t>(size));
  }
  EXPECT_EQ(munmap(p, size), 0);
}

TEST(HugePages, AllocatedBuffersAreZeroedAndLargeOnesAligned) {
  for (size_t bytes : {size_t{0}, size_t{100}, kHugePageBytes + 12345}) {
    std::shared_ptr<uint8_t[]> b = AllocateHugeAligned(bytes);
    ASSERT_NE(b, nullptr);
    if (bytes >= kHugePageBytes) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % kHugePageBytes, 0u);
    }
    for (size_t i = 0; i < bytes; i += 997) ASSERT_EQ(b[i], 0) << bytes << " " << i;
    if (bytes > 0) {
      b[bytes - 1] = 7;
      EXPECT_EQ(b[bytes - 1], 7);
    }
  }
}

TEST(ProcessMemory, MappedFilePagesCountAMappedFile) {
  const size_t size = size_t{4} << 20;
  const std::string path = WriteFile("phi4mm_file_map_resident.bin", size);
  {
    auto map = FileMap::Open(path);
    ASSERT_TRUE(map.ok()) << map.status().ToString();
    const FilePages before = MappedFilePages();
    uint32_t sum = 0;
    for (size_t i = 0; i < size; i += 4096) sum += (*map)->data()[i];
    const FilePages after = MappedFilePages();
    EXPECT_GE(after.huge, 0);
    EXPECT_LE(after.huge, after.resident);
    if (before.resident > 0) {
      EXPECT_GE(after.resident - before.resident, static_cast<int64_t>(size) / 2) << sum;
    }
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace phi4mm
