// decode_int4.cu compiled for the CPU (S4KV_CUDA_EMULATION: backend/cuda/emulation.h), for
// attention_emulation_test.
#include "backend/cuda/decode_int4.cu"
