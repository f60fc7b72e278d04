// Image-folder datasets: fixtures written with libpng and libjpeg themselves (grey, RGB, RGBA and
// palette PNGs, JPEGs at quality 100), checked for classes, labels, order, shapes and values;
// resizing against hand-computed bilinear and area cases; and every kind of bad data, whose
// messages must name the file.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include <jpeglib.h>
#include <png.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "engine/session.h"
#include "engine/training/data_source.h"
#include "engine/training/image_folder.h"
#include "tests/engine/onnx_builder.h"

namespace dw::engine::training {
namespace {

namespace fs = std::filesystem;

// Interleaved rows, as both libraries take them.
using Pixels = std::vector<uint8_t>;

std::string jpegBytes(int w, int h, int comps, const Pixels& px, int quality = 100) {
  jpeg_compress_struct c;
  jpeg_error_mgr e;
  c.err = jpeg_std_error(&e);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = static_cast<JDIMENSION>(w);
  c.image_height = static_cast<JDIMENSION>(h);
  c.input_components = comps;
  c.in_color_space = comps == 1 ? JCS_GRAYSCALE : comps == 4 ? JCS_CMYK : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  // No chroma subsampling, so quality 100 stays within a few levels of the source everywhere.
  for (int i = 0; i < c.num_components; ++i)
    c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(px.data()) + c.next_scanline * w * comps;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  std::string out(reinterpret_cast<char*>(buf), size);
  std::free(buf);
  jpeg_destroy_compress(&c);
  return out;
}

// `format` is a libpng simplified-API format; with a colormap the file is a palette PNG.
void writePng(const fs::path& path, int w, int h, uint32_t format, const Pixels& px,
              const Pixels* colormap = nullptr) {
  png_image img;
  std::memset(&img, 0, sizeof(img));
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(w);
  img.height = static_cast<png_uint_32>(h);
  img.format = format;
  if (colormap) img.colormap_entries = static_cast<png_uint_32>(colormap->size() / 3);
  ASSERT_TRUE(png_image_write_to_file(&img, path.c_str(), 0, px.data(), 0,
                                      colormap ? colormap->data() : nullptr))
      << img.message;
}

std::string readBytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// A smooth ramp, so a JPEG round trip stays close to it.
Pixels ramp(int w, int h, int comps, int offset) {
  Pixels px(static_cast<size_t>(w * h * comps));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < comps; ++c)
        px[(y * w + x) * comps + c] = static_cast<uint8_t>(offset + 4 * x + 6 * y + 20 * c);
  return px;
}

class ImageFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dw_image_folder_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path sub(const std::string& rel) {
    const fs::path p = dir_ / rel;
    fs::create_directories(p.parent_path());
    return p;
  }
  void writeFile(const std::string& rel, const std::string& bytes) {
    std::ofstream(sub(rel), std::ios::binary) << bytes;
  }
  void png(const std::string& rel, int w, int h, uint32_t format, const Pixels& px,
           const Pixels* colormap = nullptr) {
    writePng(sub(rel), w, h, format, px, colormap);
  }
  void jpeg(const std::string& rel, int w, int h, int comps, const Pixels& px) {
    writeFile(rel, jpegBytes(w, h, comps, px));
  }
  std::string path(const std::string& rel) const { return (dir_ / rel).string(); }
  fs::path dir_;
};

void expectMentions(const std::string& message, const std::string& what) {
  EXPECT_NE(message.find(what), std::string::npos) << "'" << what << "' missing in: " << message;
}

TEST_F(ImageFolderTest, ClassesLabelsOrderShapesAndValues) {
  // Class folders sorted by name; files by name ("10" before "2"); hidden files and other
  // extensions ignored, as is a hidden folder.
  const Pixels a = ramp(4, 3, 1, 0), b = ramp(4, 3, 1, 50), c = ramp(4, 3, 1, 100);
  png("b_dog/x.png", 4, 3, PNG_FORMAT_GRAY, c);
  png("a_cat/2.png", 4, 3, PNG_FORMAT_GRAY, b);
  jpeg("a_cat/10.JPG", 4, 3, 1, a);
  writeFile("a_cat/.hidden.png", "garbage");
  writeFile("a_cat/notes.txt", "not an image");
  writeFile(".cache/z.png", "garbage");
  writeFile("README", "a file beside the class folders");

  auto info = inspectImageFolder(dir_.string());
  ASSERT_TRUE(info.ok()) << info.message();
  EXPECT_EQ(info->classes, (std::vector<std::string>{"a_cat", "b_dog"}));
  EXPECT_EQ(info->countPerClass, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(info->samples, 3);
  EXPECT_EQ(info->firstHeight, 3);
  EXPECT_EQ(info->firstWidth, 4);
  EXPECT_EQ(info->firstChannels, 1);
  EXPECT_EQ(info->firstFiles, (std::vector<std::string>{path("a_cat/10.JPG"), path("a_cat/2.png"),
                                                        path("b_dog/x.png")}));

  auto d = readImageFolder(dir_.string());
  ASSERT_TRUE(d.ok()) << d.message();
  EXPECT_EQ(d->classes, info->classes);
  EXPECT_EQ(d->images.dtype(), DType::kUInt8);
  EXPECT_EQ(d->images.shape(), (Shape{3, 1, 3, 4}));
  EXPECT_EQ(d->labels.dtype(), DType::kInt64);
  EXPECT_EQ(d->labels.shape(), (Shape{3}));
  const int64_t* labels = d->labels.data<int64_t>();
  EXPECT_EQ(std::vector<int64_t>(labels, labels + 3), (std::vector<int64_t>{0, 0, 1}));
  const uint8_t* px = d->images.data<uint8_t>();
  for (int i = 0; i < 12; ++i) {
    EXPECT_NEAR(px[i], a[i], 2) << "JPEG pixel " << i;
    EXPECT_EQ(px[12 + i], b[i]) << "PNG pixel " << i;
    EXPECT_EQ(px[24 + i], c[i]) << "PNG pixel " << i;
  }

  auto two = readImageFolder(dir_.string(), {}, 2);
  ASSERT_TRUE(two.ok()) << two.message();
  EXPECT_EQ(two->images.shape(), (Shape{2, 1, 3, 4}));
  EXPECT_EQ(two->labels.data<int64_t>()[1], 0);
  EXPECT_EQ(two->classes.size(), 2u);
}

TEST_F(ImageFolderTest, PngColourTypesAndChannelConversion) {
  const Pixels grey = {0, 10, 200, 255};
  const Pixels rgb = {255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30};
  const Pixels rgba = {1, 2, 3, 0, 4, 5, 6, 128, 7, 8, 9, 255, 10, 11, 12, 40};
  const Pixels palette = {0, 1, 1, 2};
  const Pixels colormap = {10, 20, 30, 40, 50, 60, 70, 80, 90};
  png("grey.png", 2, 2, PNG_FORMAT_GRAY, grey);
  png("rgb.png", 2, 2, PNG_FORMAT_RGB, rgb);
  png("rgba.png", 2, 2, PNG_FORMAT_RGBA, rgba);
  png("pal.png", 2, 2, PNG_FORMAT_RGB_COLORMAP, palette, &colormap);
  // The palette file really is colour type 3 (byte 25 of IHDR).
  ASSERT_EQ(readBytes(dir_ / "pal.png")[25], 3);

  auto planar = [](const Tensor& t) {
    return std::vector<uint8_t>(t.data<uint8_t>(), t.data<uint8_t>() + t.size());
  };
  auto g = readImage(path("grey.png"));
  ASSERT_TRUE(g.ok()) << g.message();
  EXPECT_EQ(g->shape(), (Shape{1, 2, 2}));
  EXPECT_EQ(planar(*g), grey);

  auto c = readImage(path("rgb.png"));
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->shape(), (Shape{3, 2, 2}));
  EXPECT_EQ(planar(*c), (Pixels{255, 0, 0, 10, 0, 255, 0, 20, 0, 0, 255, 30}));

  // Alpha is dropped, not blended.
  auto a = readImage(path("rgba.png"));
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ(a->shape(), (Shape{3, 2, 2}));
  EXPECT_EQ(planar(*a), (Pixels{1, 4, 7, 10, 2, 5, 8, 11, 3, 6, 9, 12}));

  auto p = readImage(path("pal.png"));
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->shape(), (Shape{3, 2, 2}));
  EXPECT_EQ(planar(*p), (Pixels{10, 40, 40, 70, 20, 50, 50, 80, 30, 60, 60, 90}));

  // RGB -> grey is BT.601 luma, rounded; grey -> RGB repeats the plane.
  ImageFolderOptions toGrey;
  toGrey.channels = 1;
  auto cg = readImage(path("rgb.png"), toGrey);
  ASSERT_TRUE(cg.ok()) << cg.message();
  EXPECT_EQ(planar(*cg), (Pixels{76, 150, 29, 18}));  // 0.299*255, 0.587*255, 0.114*255, ...
  ImageFolderOptions toRgb;
  toRgb.channels = 3;
  auto gc = readImage(path("grey.png"), toRgb);
  ASSERT_TRUE(gc.ok()) << gc.message();
  EXPECT_EQ(planar(*gc), (Pixels{0, 10, 200, 255, 0, 10, 200, 255, 0, 10, 200, 255}));

  // A folder whose first image is a palette PNG reports 3 channels from the header alone.
  fs::create_directories(dir_ / "set" / "k");
  fs::copy_file(dir_ / "pal.png", dir_ / "set" / "k" / "a.png");
  fs::copy_file(dir_ / "grey.png", dir_ / "set" / "k" / "b.png");
  auto info = inspectImageFolder((dir_ / "set").string());
  ASSERT_TRUE(info.ok()) << info.message();
  EXPECT_EQ(info->firstChannels, 3);
  // ...and reading it makes the grey image RGB too.
  auto d = readImageFolder((dir_ / "set").string());
  ASSERT_TRUE(d.ok()) << d.message();
  EXPECT_EQ(d->images.shape(), (Shape{2, 3, 2, 2}));
  EXPECT_EQ(d->images.data<uint8_t>()[12 + 4 + 2], 200);  // sample 1, channel 1, pixel 2
}

// ImageDecoder (opset 20) runs the same decoders on a file's bytes held in a tensor.
Result<Tensor> decodeNode(const std::string& bytes, const std::string& format) {
  onnx::ModelProto m = test::emptyModel(20);
  m.set_ir_version(10);
  auto* g = m.mutable_graph();
  auto* n = g->add_node();
  n->set_op_type("ImageDecoder");
  n->add_input("bytes");
  n->add_output("image");
  auto* a = n->add_attribute();
  a->set_name("pixel_format");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(format);
  auto* in = g->add_input();
  in->set_name("bytes");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::UINT8);
  g->add_output()->set_name("image");
  auto s = InferenceSession::create(m);
  if (!s) return s.status();
  Tensor t(DType::kUInt8, {static_cast<int64_t>(bytes.size())});
  std::memcpy(t.raw(), bytes.data(), bytes.size());
  auto out = (*s)->run({{"bytes", t}});
  if (!out) return out.status();
  return out->at("image");
}

TEST_F(ImageFolderTest, ImageDecoderGivesRgbBgrAndPilGrey) {
  // (5, 5, 255) is a pixel where rounding (299 R + 587 G + 114 B) / 1000 gives 34 and PIL's
  // convert("L") 33.
  const Pixels rgb = {255, 0, 0, 0, 255, 0, 5, 5, 255, 10, 20, 30};
  png("rgb.png", 2, 2, PNG_FORMAT_RGB, rgb);
  const std::string bytes = readBytes(dir_ / "rgb.png");
  auto values = [](const Tensor& t) {
    return Pixels(t.data<uint8_t>(), t.data<uint8_t>() + t.size());
  };
  auto c = decodeNode(bytes, "RGB");
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(values(*c), rgb);
  auto bgr = decodeNode(bytes, "BGR");
  ASSERT_TRUE(bgr.ok()) << bgr.message();
  EXPECT_EQ(values(*bgr), (Pixels{0, 0, 255, 0, 255, 0, 255, 5, 5, 30, 20, 10}));
  auto grey = decodeNode(bytes, "Grayscale");
  ASSERT_TRUE(grey.ok()) << grey.message();
  EXPECT_EQ(grey->shape(), (Shape{2, 2, 1}));
  EXPECT_EQ(values(*grey), (Pixels{76, 150, 33, 18}));
  // The dataset reader converts the same way.
  ImageFolderOptions toGrey;
  toGrey.channels = 1;
  auto planar = readImage(path("rgb.png"), toGrey);
  ASSERT_TRUE(planar.ok()) << planar.message();
  EXPECT_EQ(values(*planar), values(*grey));
  // A JPEG decodes to what the dataset reader gets, interleaved.
  const Pixels ramped = ramp(16, 8, 3, 10);
  jpeg("r.jpg", 16, 8, 3, ramped);
  auto j = decodeNode(readBytes(dir_ / "r.jpg"), "RGB");
  ASSERT_TRUE(j.ok()) << j.message();
  auto jr = readImage(path("r.jpg"));
  ASSERT_TRUE(jr.ok()) << jr.message();
  for (int64_t i = 0; i < 16 * 8; ++i)
    for (int64_t k = 0; k < 3; ++k)
      ASSERT_EQ(j->data<uint8_t>()[i * 3 + k], jr->data<uint8_t>()[k * 128 + i]) << i << "," << k;
  // Another format, or a truncated file, is an error that says what it is.
  auto gif = decodeNode("GIF89a....", "RGB");
  ASSERT_FALSE(gif.ok());
  EXPECT_NE(gif.message().find("neither a PNG nor a JPEG"), std::string::npos) << gif.message();
  auto cut = decodeNode(bytes.substr(0, bytes.size() / 2), "RGB");
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.message().find("encoded_stream"), std::string::npos) << cut.message();
}

TEST_F(ImageFolderTest, JpegRgbAtQuality100StaysClose) {
  const Pixels rgb = ramp(16, 8, 3, 10);
  jpeg("c/a.jpeg", 16, 8, 3, rgb);
  auto t = readImage(path("c/a.jpeg"));
  ASSERT_TRUE(t.ok()) << t.message();
  ASSERT_EQ(t->shape(), (Shape{3, 8, 16}));
  int worst = 0;
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 16; ++x)
      for (int c = 0; c < 3; ++c)
        worst = std::max(worst, std::abs(int(t->data<uint8_t>()[(c * 8 + y) * 16 + x]) -
                                         int(rgb[(y * 16 + x) * 3 + c])));
  EXPECT_LE(worst, 3);
  auto info = inspectImageFolder(dir_.string());
  ASSERT_TRUE(info.ok()) << info.message();
  EXPECT_EQ(info->firstChannels, 3);
  EXPECT_EQ(info->firstHeight, 8);
  EXPECT_EQ(info->firstWidth, 16);
  // CMYK: libjpeg writes an Adobe marker, so the inks count as stored inverted (Photoshop's
  // convention): R = C * K / 255 and so on.
  writeFile("cmyk.jpg", jpegBytes(8, 8, 4, [] {
              Pixels px;
              for (int i = 0; i < 64; ++i) px.insert(px.end(), {255, 128, 0, 255});
              return px;
            }()));
  auto k = readImage(path("cmyk.jpg"));
  ASSERT_TRUE(k.ok()) << k.message();
  ASSERT_EQ(k->shape(), (Shape{3, 8, 8}));
  EXPECT_NEAR(k->data<uint8_t>()[0], 255, 2);
  EXPECT_NEAR(k->data<uint8_t>()[64], 128, 2);
  EXPECT_NEAR(k->data<uint8_t>()[128], 0, 2);
}

TEST_F(ImageFolderTest, JpegGreyFolderInfo) {
  jpeg("c/a.jpeg", 16, 8, 1, ramp(16, 8, 1, 10));
  auto info = inspectImageFolder(dir_.string());
  ASSERT_TRUE(info.ok()) << info.message();
  EXPECT_EQ(info->firstChannels, 1);
  EXPECT_EQ(info->firstHeight, 8);
  EXPECT_EQ(info->firstWidth, 16);
}

TEST_F(ImageFolderTest, ResizeBilinearAndAreaByHand) {
  auto row = [](std::vector<uint8_t> v) {
    return Tensor::fromVector<uint8_t>(v, {1, 1, static_cast<int64_t>(v.size())});
  };
  auto values = [](const Tensor& t) {
    return std::vector<int>(t.data<uint8_t>(), t.data<uint8_t>() + t.size());
  };
  // Upscaling 2 -> 4: centres at source -0.25 (clamped to 0), 0.25, 0.75, 1.25 (clamped to 1).
  EXPECT_EQ(values(resizeImage(row({0, 100}), 1, 4)), (std::vector<int>{0, 25, 75, 100}));
  // Exactly 2x down is still bilinear: source 0.5 and 2.5, halfway between neighbours.
  EXPECT_EQ(values(resizeImage(row({0, 40, 80, 120}), 1, 2)), (std::vector<int>{20, 100}));
  // 3x down averages each block of three (bilinear would read 2 of the 3).
  EXPECT_EQ(values(resizeImage(row({0, 30, 60, 90, 120, 150}), 1, 2)), (std::vector<int>{30, 120}));
  // 2.5x down: output 0 covers [0, 2.5): (0 + 50 + 0.5 * 100) / 2.5; output 1 the rest.
  EXPECT_EQ(values(resizeImage(row({0, 50, 100, 150, 200}), 1, 2)), (std::vector<int>{40, 160}));
  // Area along y (6 -> 2) and bilinear along x (2 -> 4) in one go, through readImage.
  Pixels img(12);
  for (int y = 0; y < 6; ++y) {
    img[y * 2] = static_cast<uint8_t>(10 * y);
    img[y * 2 + 1] = static_cast<uint8_t>(10 * y + 100);
  }
  png("r.png", 2, 6, PNG_FORMAT_GRAY, img);
  ImageFolderOptions o;
  o.height = 2;
  o.width = 4;
  auto t = readImage(path("r.png"), o);
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(t->shape(), (Shape{1, 2, 4}));
  // Rows average to 10 and 40 (means of 0,10,20 and 30,40,50); columns to +0, +25, +75, +100.
  EXPECT_EQ(values(*t), (std::vector<int>{10, 35, 85, 110, 40, 65, 115, 140}));
  // Same size: untouched.
  o.height = 6;
  o.width = 2;
  t = readImage(path("r.png"), o);
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(values(*t), std::vector<int>(img.begin(), img.end()));
}

TEST_F(ImageFolderTest, ResizeMakesMixedSizesOneBatchAndMismatchNamesBothFiles) {
  png("k/a.png", 4, 4, PNG_FORMAT_GRAY, Pixels(16, 7));
  png("k/b.png", 6, 2, PNG_FORMAT_GRAY, Pixels(12, 9));
  // The headers tell before anything is decoded (the Data panel showed such a folder as fitting).
  auto info = inspectImageFolder(dir_.string());
  ASSERT_TRUE(info.ok()) << info.message();
  expectMentions(info->otherSize, path("k/b.png") + " is 6x2");
  auto d = readImageFolder(dir_.string());
  ASSERT_FALSE(d.ok());
  expectMentions(d.message(), path("k/b.png"));
  expectMentions(d.message(), "6x2");
  expectMentions(d.message(), path("k/a.png"));
  expectMentions(d.message(), "4x4");
  expectMentions(d.message(), "resize");
  ImageFolderOptions o;
  o.height = 3;
  o.width = 5;
  d = readImageFolder(dir_.string(), o);
  ASSERT_TRUE(d.ok()) << d.message();
  EXPECT_EQ(d->images.shape(), (Shape{2, 1, 3, 5}));
  EXPECT_EQ(d->images.data<uint8_t>()[0], 7);
  EXPECT_EQ(d->images.data<uint8_t>()[15 + 14], 9);
}

// The labels of a folder of mixed sizes, read by a source of their own, need no resize: a
// project resizing only its pixel source failed at its label source.
TEST_F(ImageFolderTest, LabelSourceOfMixedSizesNeedsNoResize) {
  png("k/a.png", 4, 4, PNG_FORMAT_GRAY, Pixels(16, 7));
  png("k/b.png", 6, 2, PNG_FORMAT_GRAY, Pixels(12, 9));
  png("m/c.png", 3, 5, PNG_FORMAT_GRAY, Pixels(15, 1));
  DataFileSpec pixels, labels;
  pixels.input = "x";
  pixels.path = labels.path = dir_.string();
  pixels.format = labels.format = "images";
  pixels.imageHeight = pixels.imageWidth = 4;
  labels.input = "y";
  labels.imageTakeLabel = true;
  auto d = loadDataset({pixels, labels}, "", 0);
  ASSERT_TRUE(d.ok()) << d.message();
  const Tensor& y = d->columns.at("y");
  ASSERT_EQ(y.shape(), (Shape{3}));
  EXPECT_EQ(y.data<int64_t>()[0], 0);
  EXPECT_EQ(y.data<int64_t>()[1], 0);
  EXPECT_EQ(y.data<int64_t>()[2], 1);
  EXPECT_EQ(d->columns.at("x").shape(), (Shape{3, 1, 4, 4}));
  // The first samples only, as with a train limit.
  d = loadDataset({pixels, labels}, "", 2);
  ASSERT_TRUE(d.ok()) << d.message();
  EXPECT_EQ(d->columns.at("y").shape(), (Shape{2}));
}

TEST_F(ImageFolderTest, ParallelDecodingKeepsSampleOrder) {
  for (int cls = 0; cls < 3; ++cls)
    for (int i = 0; i < 15; ++i) {
      const std::string name = "c" + std::to_string(cls) + "/img" + std::to_string(100 + i);
      if (i % 2)
        png(name + ".png", 5, 4, PNG_FORMAT_GRAY, ramp(5, 4, 1, cls * 15 + i));
      else
        jpeg(name + ".jpg", 5, 4, 1, ramp(5, 4, 1, cls * 15 + i));
    }
  auto d = readImageFolder(dir_.string());
  ASSERT_TRUE(d.ok()) << d.message();
  ASSERT_EQ(d->images.shape(), (Shape{45, 1, 4, 5}));
  auto info = inspectImageFolder(dir_.string());
  ASSERT_TRUE(info.ok()) << info.message();
  EXPECT_EQ(info->firstFiles.size(), 16u);
  for (int64_t s = 0; s < 45; ++s) {
    EXPECT_EQ(d->labels.data<int64_t>()[s], s / 15);
    const int64_t i = s % 15;
    const std::string name =
        "c" + std::to_string(s / 15) + "/img" + std::to_string(100 + i) + (i % 2 ? ".png" : ".jpg");
    auto one = readImage(path(name));
    ASSERT_TRUE(one.ok()) << one.message();
    EXPECT_EQ(std::memcmp(one->data<uint8_t>(), d->images.data<uint8_t>() + s * 20, 20), 0) << name;
    if (s < 16) EXPECT_EQ(info->firstFiles[s], path(name));
  }
}

TEST_F(ImageFolderTest, TruncatedJpegNamesFileAndBytes) {
  const std::string good = jpegBytes(16, 16, 3, ramp(16, 16, 3, 0));
  writeFile("k/ok.jpg", good);
  writeFile("k/short.jpg", good.substr(0, good.size() / 2));
  auto d = readImageFolder(dir_.string());
  ASSERT_FALSE(d.ok());
  expectMentions(d.message(), path("k/short.jpg"));
  expectMentions(d.message(), "truncated after " + std::to_string(good.size() / 2) + " bytes");
  expectMentions(d.message(), "re-save the file");
  // Cut inside the header too.
  writeFile("h.jpg", good.substr(0, 20));
  auto t = readImage(path("h.jpg"));
  ASSERT_FALSE(t.ok());
  expectMentions(t.message(), path("h.jpg"));
  expectMentions(t.message(), "truncated after 20 bytes");
}

TEST_F(ImageFolderTest, TextWithJpgExtensionSaysWhatItStartsWith) {
  png("k/a.png", 2, 2, PNG_FORMAT_GRAY, Pixels(4, 1));
  writeFile("k/b.jpg", "hello world, I am text\n");
  auto d = readImageFolder(dir_.string());
  ASSERT_FALSE(d.ok());
  expectMentions(d.message(), path("k/b.jpg"));
  expectMentions(d.message(), "not a JPEG: starts with 68 65 6C 6C 6F 20 77 6F (\"hello wo\")");
  expectMentions(d.message(), "remove or re-save the file");
  writeFile("e.png", "");
  auto t = readImage(path("e.png"));
  ASSERT_FALSE(t.ok());
  expectMentions(t.message(), path("e.png"));
  expectMentions(t.message(), "empty");
  // A PNG named .jpg is read by its content.
  fs::copy_file(dir_ / "k/a.png", dir_ / "really_png.jpg");
  t = readImage(path("really_png.jpg"));
  ASSERT_TRUE(t.ok()) << t.message();
}

TEST_F(ImageFolderTest, TruncatedAndCorruptPngNameTheFile) {
  png("a.png", 8, 8, PNG_FORMAT_RGB, ramp(8, 8, 3, 0));
  const std::string good = readBytes(dir_ / "a.png");
  writeFile("cut.png", good.substr(0, good.size() - 30));
  auto t = readImage(path("cut.png"));
  ASSERT_FALSE(t.ok());
  expectMentions(t.message(), path("cut.png"));
  expectMentions(t.message(), "truncated after " + std::to_string(good.size() - 30) + " bytes");
  // A flipped byte in the image data fails the chunk's CRC: libpng's own message.
  std::string bad = good;
  const auto idat = bad.find("IDAT");
  ASSERT_NE(idat, std::string::npos);
  bad[idat + 8] = static_cast<char>(~bad[idat + 8]);
  writeFile("crc.png", bad);
  t = readImage(path("crc.png"));
  ASSERT_FALSE(t.ok());
  expectMentions(t.message(), path("crc.png"));
  expectMentions(t.message(), "corrupt PNG: ");
  expectMentions(t.message(), "re-save the file");
}

TEST_F(ImageFolderTest, FirstBadFileInSampleOrderIsReported) {
  for (int i = 0; i < 20; ++i)
    png("k/" + std::to_string(10 + i) + ".png", 3, 3, PNG_FORMAT_GRAY, Pixels(9, 5));
  writeFile("k/15.png", "junk one");
  writeFile("k/25.png", "junk two");
  for (int run = 0; run < 5; ++run) {
    auto d = readImageFolder(dir_.string());
    ASSERT_FALSE(d.ok());
    expectMentions(d.message(), path("k/15.png"));
  }
}

TEST_F(ImageFolderTest, LayoutErrorsSayWhatIsExpected) {
  // Images but no class subfolders.
  png("flat/a.png", 2, 2, PNG_FORMAT_GRAY, Pixels(4, 1));
  auto d = readImageFolder(path("flat"));
  ASSERT_FALSE(d.ok());
  expectMentions(d.message(), path("flat"));
  expectMentions(d.message(), "one subfolder per class");
  expectMentions(d.message(), "1 images");
  auto info = inspectImageFolder(path("flat"));
  ASSERT_FALSE(info.ok());
  expectMentions(info.message(), "one subfolder per class");
  // An empty class folder (only a text file and a hidden image in it).
  png("set/a/1.png", 2, 2, PNG_FORMAT_GRAY, Pixels(4, 1));
  writeFile("set/b/readme.txt", "x");
  writeFile("set/b/.x.png", "x");
  d = readImageFolder(path("set"));
  ASSERT_FALSE(d.ok());
  expectMentions(d.message(), path("set/b"));
  expectMentions(d.message(), "no PNG or JPEG");
  // Missing folder, a file given as the folder, and bad options.
  d = readImageFolder(path("nope"));
  ASSERT_FALSE(d.ok());
  expectMentions(d.message(), path("nope"));
  d = readImageFolder(path("set/a/1.png"));
  ASSERT_FALSE(d.ok());
  expectMentions(d.message(), "not a folder");
  ImageFolderOptions o;
  o.channels = 2;
  d = readImageFolder(path("set"), o);
  ASSERT_FALSE(d.ok());
  expectMentions(d.message(), "1 (grey) or 3 (RGB)");
  o = {};
  o.height = 10;
  EXPECT_FALSE(readImage(path("set/a/1.png"), o).ok());
}

// Random damage to valid files must end in a result or an error, never a crash or a hang.
TEST_F(ImageFolderTest, DamagedFilesNeverCrash) {
  const std::string jpg = jpegBytes(24, 16, 3, ramp(24, 16, 3, 3), 90);
  png("p.png", 24, 16, PNG_FORMAT_RGBA, ramp(24, 16, 4, 3));
  const std::string pngBytes = readBytes(dir_ / "p.png");
  std::mt19937 rng(7);
  int failures = 0;
  for (int i = 0; i < 300; ++i) {
    std::string bytes = i % 2 ? jpg : pngBytes;
    const int flips = 1 + static_cast<int>(rng() % 6);
    for (int k = 0; k < flips; ++k) bytes[rng() % bytes.size()] = static_cast<char>(rng() & 0xff);
    if (i % 5 == 0) bytes.resize(rng() % bytes.size());
    const std::string name = "f" + std::to_string(i) + (i % 2 ? ".jpg" : ".png");
    writeFile(name, bytes);
    auto t = readImage(path(name));
    if (!t.ok()) {
      ++failures;
      expectMentions(t.message(), path(name));
    }
  }
  EXPECT_GT(failures, 0);
}

}  // namespace
}  // namespace dw::engine::training
