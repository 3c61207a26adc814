# cmake -DIN=<kernel.cu> -DOUT=<file.cc> -P emulated_kernel_source.cmake
# The kernel source as the CPU emulator builds it (src/ops/cuda/emu/prelude.h): the prelude
# first, then the source with each `extern __shared__ T name[];` (host C++ has no such array)
# made a pointer to the emulated CTA's dynamic shared memory. #line keeps diagnostics on the
# original file.
file(READ "${IN}" text)
string(REGEX REPLACE
  "extern __shared__ (__align__\\([0-9]+\\) )?([A-Za-z_][A-Za-z_0-9 ]*[A-Za-z_0-9]) ([A-Za-z_][A-Za-z_0-9]*)\\[\\];"
  "\\2* const \\3 = reinterpret_cast<\\2*>(::mls::ops::cuda::emu::dynamic_smem());"
  text "${text}")
file(WRITE "${OUT}.tmp" "#include \"ops/cuda/emu/prelude.h\"\n#line 1 \"${IN}\"\n${text}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
