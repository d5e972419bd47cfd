# CMake toolchain file for cross-compiling phi4mm to 64-bit ARM Linux with Debian's cross toolchain
# (apt: g++-aarch64-linux-gnu) and the arm64 builds of the dependencies installed side by side
# through multiarch (dpkg --add-architecture arm64; apt: libpcre2-dev:arm64 libsndfile1-dev:arm64
# libsoxr-dev:arm64 libwebp-dev:arm64 libjpeg62-turbo-dev:arm64 libcpp-httplib-dev:arm64
# libgtest-dev:arm64 libhwy-dev:arm64; scripts/setup_cross.sh does all of it). The binaries run here under
# qemu-aarch64 user-mode emulation (apt: qemu-user), which CMake uses as the emulator for test
# discovery and ctest. Use: cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Debian multiarch: the arm64 libraries and CMake package files live under lib/aarch64-linux-gnu;
# headers are shared in /usr/include.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
# The optional ONNX exporter and the Google Benchmark kernels are left out: their arm64 packages
# are not needed for the engine, the tests or the CLI.
set(CMAKE_DISABLE_FIND_PACKAGE_ONNX TRUE)
set(CMAKE_DISABLE_FIND_PACKAGE_Protobuf TRUE)
set(CMAKE_DISABLE_FIND_PACKAGE_benchmark TRUE)
# QEMU_CPU (e.g. cortex-a53 for a CPU without the dot-product instructions) picks the emulated CPU.
# The program runs through the multiarch arm64 loader, not QEMU's -L sysroot prefix (under -L the
# first pthread_create spins forever; docs/portability.md).
find_program(PHI4MM_QEMU_AARCH64 qemu-aarch64)
if(PHI4MM_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR "${PHI4MM_QEMU_AARCH64};/lib/ld-linux-aarch64.so.1")
endif()
