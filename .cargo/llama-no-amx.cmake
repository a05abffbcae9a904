# Included after every project() of llama.cpp's CMake build (CMAKE_PROJECT_INCLUDE, set in
# .cargo/config.toml). ggml compiles its AMX kernels, and uses them, whenever the compiler
# targets AMX, which -march=native does on Sapphire Rapids and later; they crash there
# (ggml-org/llama.cpp#20824). Explicit -mno-* flags win over -march=native in GCC and
# Clang whatever their order, so ggml runs the AVX-512 kernels every other x86 CPU runs.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$" AND NOT MSVC)
  add_compile_options(-mno-amx-tile -mno-amx-int8 -mno-amx-bf16)
endif()
