// The dispatch layer, in three torch-free, CUDA-free headers: the kernel registry (registry.h:
// names, constraints, capabilities), the cost model of the prefill plans (cost_model.h) and the
// policy that turns a problem into a plan (policy.h). Includers that need all three include this.
#pragma once
#include "cost_model.h"
#include "policy.h"
#include "registry.h"
