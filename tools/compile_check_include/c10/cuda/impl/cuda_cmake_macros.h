// Stand-in for the header that CPU-only torch wheels omit. Used only by tools/compile_cuda.sh to
// compile-check the CUDA sources on machines without a CUDA build of torch; never by real builds.
#pragma once
