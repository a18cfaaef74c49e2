# CMake toolchain file: cross-build weft for AArch64 Linux on a Debian
# x86-64 host, and run the tests under qemu-user.
#
#   cmake -S . -B build/aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
#
# (`make test-aarch64` does this.) It needs Debian's cross compilers and the
# arm64 libraries of the multiarch archive (scripts/deps.sh ci):
#
#   gcc-aarch64-linux-gnu g++-aarch64-linux-gnu   compilers, libgomp, libstdc++
#   libc6-dev-arm64-cross                         glibc, in /usr/aarch64-linux-gnu
#   libcunit1-dev:arm64                           CUnit, in /usr/lib/aarch64-linux-gnu
#   qemu-user                                     qemu-aarch64, to run the tests
#
# Libraries come from two places: the cross toolchain's own tree
# (/usr/aarch64-linux-gnu: glibc, libgomp) and Debian's multiarch directories
# (/usr/lib/aarch64-linux-gnu for libraries, /usr/include for arch-independent
# headers such as CUnit's). Both are search roots below; with
# CMAKE_LIBRARY_ARCHITECTURE set, the multiarch root finds only the arm64
# libraries, never the host's in /usr/lib/x86_64-linux-gnu.

set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_ASM_COMPILER aarch64-linux-gnu-gcc)

# Headers, libraries and CMake packages: only for the target; programs: the host's.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# pkg-config (liburing, when not switched off) must see the arm64 .pc files only.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# CTest (and try_run) run target programs under qemu-user. -L makes the
# dynamic loader come from the cross toolchain's glibc; LD_LIBRARY_PATH makes
# libc.so.6 come from the same place. Without it the loader would find the
# multiarch libc6:arm64 (installed with libcunit1:arm64) through
# /etc/ld.so.cache, a different Debian revision of glibc than its own
# ld-linux-aarch64.so.1, and such a mixed process hangs in the child after
# fork(). Multiarch libraries (CUnit) are still found through the cache.
set(CMAKE_CROSSCOMPILING_EMULATOR
    qemu-aarch64 -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib)
