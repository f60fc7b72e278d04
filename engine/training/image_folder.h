// Image-folder datasets: one subfolder per class, PNG and JPEG files, decoded with libpng and
// libjpeg-turbo (not Qt: the CLI reads them too) into uint8 [N, C, H, W] with int64 labels.
//
// Layout: DIR/<class>/<image>. Classes are the subfolders sorted by name (their index is the
// label); a class's images are its .png/.jpg/.jpeg files sorted by name. Hidden files and
// folders and other extensions are ignored. The format is told from the file's first bytes, so a
// PNG named .jpg still reads; a file that is neither is an error naming it.
//
// Contract: a corrupt, truncated or mis-sized file fails with a message naming the file, what is
// wrong and what to do; decoding never exits the process, crashes or hangs. Decoding runs on
// several threads, but the samples' order (and which error is reported: the first bad file in
// sample order) does not depend on the threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "nodes/status.h"

namespace dw::engine::training {

struct ImageFolderOptions {
  int64_t height = 0, width = 0;  // resize every image to this (0 = every image must have the
                                  // first image's size); set both or neither
  int64_t channels = 0;           // 1 (grey) or 3 (RGB); 0 = the first image's (grey stays 1,
                                  // RGB/RGBA/palette -> 3)
};

struct ImageFolderInfo {             // from the file headers only: fast, decodes nothing
  std::vector<std::string> classes;  // subfolder names, sorted
  std::vector<int64_t> countPerClass;
  int64_t samples = 0;
  int64_t firstHeight = 0, firstWidth = 0, firstChannels = 0;  // of the first image (after the
                                                               // palette/alpha rules above)
  std::vector<std::string> firstFiles;  // up to 16 paths in sample order, for previews
  // An image of another size than the first ("b/001.png is 40x30"), from the headers of up to
  // 2000 files spread over the folder; empty where they agree. Such a folder needs a resize.
  std::string otherSize;
};

struct ImageFolderData {
  Tensor images;  // uint8 [N, C, H, W], samples in order: class 0's files sorted by name, then
                  // class 1's...
  Tensor labels;  // int64 [N], the class index
  std::vector<std::string> classes;
};

Result<ImageFolderInfo> inspectImageFolder(const std::string& dir);

// maxSamples: 0 = all; else the first maxSamples in sample order.
Result<ImageFolderData> readImageFolder(const std::string& dir, const ImageFolderOptions& o = {},
                                        int64_t maxSamples = 0);

// One image decoded to uint8 [C, H, W] (resized / channel-converted as above); for previews and
// tests.
Result<Tensor> readImage(const std::string& path, const ImageFolderOptions& o = {});

// One PNG or JPEG held in memory, decoded to interleaved uint8 [H, W, C] with C = `channels`
// (1 grey, 3 RGB; 0: the image's own after the palette/alpha rules). `what` names the data in
// errors. ImageDecoder's kernel.
Result<Tensor> decodeImageBytes(const std::string& bytes, const std::string& what,
                                int64_t channels = 0);

// The resampling readImage uses, exposed for tests: uint8 [C, H, W] to [C, outH, outW]. Each axis
// is bilinear with half-pixel centres (edges clamped), or an area average where that axis shrinks
// by more than 2x, so thumbnails do not alias.
Tensor resizeImage(const Tensor& chw, int64_t outH, int64_t outW);

}  // namespace dw::engine::training
