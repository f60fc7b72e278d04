// deepwire.layers: Keras-style layers. Each one is a NodeSpec of kind Layer with a lowering
// function that emits the fewest standard ONNX nodes that do the job. Data layout is ONNX's
// (channels first: N, C, spatial...), as in PyTorch; sequences are batch first (N, T, features).
//
// How to add a layer: in its family's file under nodes/layers/ (core, convolution, pooling,
// normalization, reshaping, recurrent, attention), write `Status lowerX(LoweringBuilder& b)` and
// add an `add(cb, {...})` entry with its ports and parameters to that file's add...() function,
// below the lowerings (nodes/layers/common.h has the shared helpers). A new family gets a file,
// a declaration in common.h and a call below. Export, the engine and training need nothing else:
// they only ever see the ONNX the layer lowers to.
#include "nodes/catalogue.h"
#include "nodes/layers/common.h"

namespace dw {

void addLayersDomain(CatalogueBuilder& cb) {
  cb.setDefaultOpset(kLayersDomain, 1);
  // The order of registration interleaves some families (pooling and padding go by spatial rank),
  // and where two layers share a key or an alias it decides which one the catalogue finds (the
  // later).
  layers::addDense(cb);
  layers::addReshaping(cb);
  layers::addRegularization(cb);
  layers::addEmbedding(cb);
  layers::addActivations(cb);
  layers::addConvolutions(cb);
  for (size_t nd = 1; nd <= 3; ++nd) {
    layers::addPooling(cb, nd);
    layers::addPaddingAndResampling(cb, nd);
  }
  layers::addNormalization(cb);
  layers::addMerging(cb);
  layers::addSplit(cb);
  layers::addRecurrent(cb);
  layers::addAttention(cb);
}

}  // namespace dw
