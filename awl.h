/*
 * awl.h - everything a program using awl needs, in one include.
 *
 *   common/   errors, dtypes, the Philox generator
 *   backends/ the device interface (backend.h), its CPU and CUDA tables, and
 *             the BLAS library under the CPU backend (cpu/cpu_blas.h)
 *   tensor/   the strided tensor, scopes, creation, raw compute
 *   autograd/ differentiable ops, the backward engine, checkpointing
 *   nn/       modules, the GPT and its generation, optimizers, schedules,
 *             checkpoints
 *   data/     tokenizers and text datasets
 *   dist/     process groups, collectives, DDP (data-parallel training)
 *
 * docs/architecture.md walks through the layers.
 */
#ifndef AWL_H
#define AWL_H

#include "common/error.h"
#include "common/philox.h"
#include "backends/cpu/cpu_blas.h"
#include "tensor/tensor.h"
#include "tensor/profiler.h"
#include "autograd/autograd.h"
#include "autograd/checkpoint.h"
#include "nn/param.h"
#include "nn/nn.h"
#include "nn/gpt.h"
#include "nn/generate.h"
#include "nn/optim.h"
#include "nn/safetensors.h"
#include "nn/checkpoint_io.h"
#include "data/data.h"
#include "dist/dist.h"

#endif
