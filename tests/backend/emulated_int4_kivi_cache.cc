// int4_kivi_cache.cu compiled for the CPU (S4KV_CUDA_EMULATION: backend/cuda/emulation.h), for the
// emulation tests.
#include "backend/cuda/int4_kivi_cache.cu"
