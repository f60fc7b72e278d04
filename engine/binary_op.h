// The function an elementwise op of two inputs computes for a node: its row of
// ops/binary_table.h, or the row's choice by attribute (Mod's fmod, BitShift's direction).
#pragma once

#include "engine/kernel.h"
#include "ops/binary_table.h"

namespace dw::engine {

Result<ops::BinaryFn> chooseBinary(const ops::BinaryOp& row, const Attributes& attrs);

}  // namespace dw::engine
