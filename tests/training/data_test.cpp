// Dataset readers (IDX plain/gzip, NPY, CSV), their error positions, and the batch loader.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>

#include "engine/training/data.h"
#include "engine/training/data_source.h"

namespace dw::engine::training {
namespace {

namespace fs = std::filesystem;

class DataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dw_data_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& bytes) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  std::string writeGz(const std::string& name, const std::string& bytes) {
    const std::string p = (dir_ / name).string();
    gzFile f = gzopen(p.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
    return p;
  }
  static std::string idxBytes(uint8_t type, std::vector<uint32_t> dims, const std::string& data) {
    std::string s = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
    for (uint32_t d : dims)
      for (int k = 3; k >= 0; --k) s += static_cast<char>((d >> (8 * k)) & 0xff);
    return s + data;
  }
  fs::path dir_;
};

TEST_F(DataTest, IdxPlainAndGzip) {
  std::string data;
  for (int i = 0; i < 2 * 3 * 2; ++i) data += static_cast<char>(i * 10);
  const std::string bytes = idxBytes(0x08, {2, 3, 2}, data);
  for (const auto& path : {write("a.idx", bytes), writeGz("a.idx.gz", bytes)}) {
    auto t = readIdx(path);
    ASSERT_TRUE(t.ok()) << t.message();
    EXPECT_EQ(t->dtype(), DType::kUInt8);
    EXPECT_EQ(t->shape(), (Shape{2, 3, 2}));
    EXPECT_EQ(t->data<uint8_t>()[5], 50);
  }
  // Big-endian int32 and float payloads are swapped to host order.
  std::string be = {0,
                    0,
                    1,
                    2,
                    static_cast<char>(0xff),
                    static_cast<char>(0xff),
                    static_cast<char>(0xff),
                    static_cast<char>(0xfe)};
  auto t = readIdx(write("i.idx", idxBytes(0x0C, {2}, be)));
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(t->data<int32_t>()[0], 258);
  EXPECT_EQ(t->data<int32_t>()[1], -2);
}

TEST_F(DataTest, IdxTruncatedOrCorruptNamesBytePosition) {
  const std::string bytes = idxBytes(0x08, {4, 5}, std::string(20, 'x'));
  auto t = readIdx(write("trunc.idx", bytes.substr(0, bytes.size() - 3)));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("ends at byte 29"), std::string::npos) << t.message();
  EXPECT_NE(t.message().find("trunc.idx"), std::string::npos);
  t = readIdx(write("hdr.idx", bytes.substr(0, 6)));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("needs 12 bytes, the file holds 6"), std::string::npos) << t.message();
  t = readIdx(write("magic.idx", "\x01\x02\x08\x01"));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("magic"), std::string::npos) << t.message();
  t = readIdx(write("type.idx", idxBytes(0x07, {1}, "x")));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("byte 2"), std::string::npos) << t.message();
  // A gzip stream cut short, and one with flipped bytes.
  const std::string gz = writeGz("ok.gz", idxBytes(0x08, {1000}, std::string(1000, 'q')));
  std::ifstream in(gz, std::ios::binary);
  std::string z((std::istreambuf_iterator<char>(in)), {});
  t = readIdx(write("cut.gz", z.substr(0, z.size() / 2)));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("compressed byte"), std::string::npos) << t.message();
  std::string bad = z;
  for (size_t i = 12; i < 20 && i < bad.size(); ++i) bad[i] = static_cast<char>(~bad[i]);
  t = readIdx(write("bad.gz", bad));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("byte"), std::string::npos) << t.message();
}

TEST_F(DataTest, NpyRoundTripAndErrors) {
  Tensor t = Tensor::fromVector<float>({1.5f, -2.f, 3.25f, 4.f, 5.f, 6.f}, {2, 3});
  const std::string p = (dir_ / "a.npy").string();
  ASSERT_TRUE(writeNpy(p, t).ok());
  auto r = readNpy(p);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->shape(), (Shape{2, 3}));
  EXPECT_EQ(r->dtype(), DType::kFloat);
  EXPECT_EQ(r->data<float>()[2], 3.25f);
  Tensor l = Tensor::fromVector<int64_t>({7, 8, 9}, {3});
  ASSERT_TRUE(writeNpy((dir_ / "l.npy").string(), l).ok());
  r = readNpy((dir_ / "l.npy").string());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shape(), (Shape{3}));
  EXPECT_EQ(r->data<int64_t>()[2], 9);

  std::ifstream in(p, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  r = readNpy(write("cut.npy", bytes.substr(0, bytes.size() - 4)));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("ends at byte " + std::to_string(bytes.size() - 4)), std::string::npos)
      << r.message();
  r = readNpy(write("x.npy", "hello world"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("byte 0"), std::string::npos);
  std::string fortran = bytes;
  const auto pos = fortran.find("False");
  fortran.replace(pos, 5, "True ");
  // Fortran order (numpy.asfortranarray, MATLAB and R exports): the first axis runs fastest in
  // the file, and the reader hands back the row-major tensor.
  r = readNpy(write("f.npy", fortran));
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->shape(), (Shape{2, 3}));
  EXPECT_EQ(std::vector<float>(r->data<float>(), r->data<float>() + 6),
            (std::vector<float>{1.5f, 3.25f, 5.f, -2.f, 4.f, 6.f}));
  std::string cube = "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3, 4), }";
  cube.resize(118, ' ');
  cube = std::string("\x93NUMPY\x01\x00", 8) + char(cube.size() + 1) + '\0' + cube + '\n';
  for (int32_t k = 0; k < 24; ++k) cube.append(reinterpret_cast<const char*>(&k), 4);
  r = readNpy(write("cube.npy", cube));
  ASSERT_TRUE(r.ok()) << r.message();
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t l = 0; l < 4; ++l)
        EXPECT_EQ(r->data<int32_t>()[(i * 3 + j) * 4 + l], i + 2 * j + 6 * l) << i << j << l;
}

TEST_F(DataTest, CsvHeaderLabelAndErrors) {
  const std::string p = write("d.csv", "a,label,b\n1,0,2.5\n3,1,-4\n\n5,2,6e1\n");
  CsvOptions o;
  o.labelColumn = "label";
  auto r = readCsv(p, o);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->features.shape(), (Shape{3, 2}));
  EXPECT_FLOAT_EQ(r->features.data<float>()[5], 60.f);
  ASSERT_TRUE(r->labels.has_value());
  EXPECT_EQ(r->labels->dtype(), DType::kInt64);
  EXPECT_EQ(r->labels->data<int64_t>()[2], 2);
  EXPECT_EQ(r->featureNames, (std::vector<std::string>{"a", "b"}));
  o.labelColumn = "0";
  o.header = false;
  r = readCsv(write("n.csv", "1,2\n3,4\n"), o);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->labels->data<int64_t>()[1], 3);

  r = readCsv(write("bad.csv", "a,b\n1,2\n3,x\n"), {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("bad.csv line 3, column 2 ('b')"), std::string::npos) << r.message();
  r = readCsv(write("ragged.csv", "a,b\n1,2\n3\n"), {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("ragged.csv line 3: 1 fields, the header has 2"), std::string::npos)
      << r.message();
  o = CsvOptions{};
  o.labelColumn = "nope";
  r = readCsv(p, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("nope"), std::string::npos);
}

// A CSV written without a header: its first line of numbers is a sample, not column names
// (a user trial's 300-row file read as 299), unless it counts 0, 1, 2... as pandas names
// unnamed columns.
TEST_F(DataTest, CsvFirstLineOfNumbersIsData) {
  auto r = readCsv(write("plain.csv", "1,2\n3,4\n5,6\n"), {});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->features.shape(), (Shape{3, 2}));
  EXPECT_FLOAT_EQ(r->features.data<float>()[0], 1.f);
  r = readCsv(write("pandas.csv", "0,1\n3,4\n5,6\n"), {});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->features.shape(), (Shape{2, 2}));
  r = readCsv(write("ragged2.csv", "1,2\n3\n"), {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("the first line has 2"), std::string::npos) << r.message();
}

// Every message names the file, the byte (binary) or line (CSV), and says what to do.
void expectMentions(const std::string& message, const std::string& what) {
  EXPECT_NE(message.find(what), std::string::npos) << "'" << what << "' missing in: " << message;
}

TEST_F(DataTest, IdxErrorsSayWhatTheHeaderPromised) {
  const std::string bytes = idxBytes(0x08, {2, 2, 5}, std::string(20, 'x'));
  auto t = readIdx(write("short.idx", bytes.substr(0, bytes.size() - 3)));
  ASSERT_FALSE(t.ok());
  expectMentions(t.message(),
                 "short.idx: truncated: the header promises 20 bytes of data after byte 16 "
                 "(shape [2, 2, 5], uint8), the file holds 17 (it ends at byte 33)");
  expectMentions(t.message(), "copy or download the file again");
  // The same inside a gzip file: positions are in the decompressed data.
  t = readIdx(writeGz("short.idx.gz", bytes.substr(0, bytes.size() - 3)));
  ASSERT_FALSE(t.ok());
  expectMentions(t.message(),
                 "short.idx.gz: truncated: the header promises 20 bytes of data "
                 "after byte 16 of the decompressed data");
  t = readIdx(write("long.idx", bytes + "zz"));
  ASSERT_FALSE(t.ok());
  expectMentions(t.message(), "long.idx: 2 extra bytes after byte 36");
  // A text file: the magic is shown as it is.
  t = readIdx(write("text.idx", "label,pixel0\n1,2\n"));
  ASSERT_FALSE(t.ok());
  expectMentions(t.message(), "text.idx: not an IDX file: its magic at byte 0 is 6C 61 62 65");
  // Dims whose product does not fit in 64 bits: refused, not wrapped.
  t = readIdx(write("huge.idx", idxBytes(0x0D, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, "abcd")));
  ASSERT_FALSE(t.ok());
  expectMentions(t.message(), "huge.idx: truncated: the header promises more than 2^63 bytes");
  // A type code is shown in hex.
  t = readIdx(write("type.idx", idxBytes(0x1A, {1}, "x")));
  ASSERT_FALSE(t.ok());
  expectMentions(t.message(), "type.idx: IDX type code 1A at byte 2");
  // A corrupt gzip stream names the compressed byte.
  const std::string gz = writeGz("ok.gz", idxBytes(0x08, {3000}, std::string(3000, 'q')));
  std::ifstream in(gz, std::ios::binary);
  std::string z((std::istreambuf_iterator<char>(in)), {});
  for (size_t i = 10; i < z.size() - 8; ++i) z[i] = static_cast<char>(0xff);
  t = readIdx(write("bad.gz", z));
  ASSERT_FALSE(t.ok());
  expectMentions(t.message(), "bad.gz: gzip data is corrupt at compressed byte ");
  expectMentions(t.message(), "copy or download the file again");
}

TEST_F(DataTest, IdxHeaderOnly) {
  const std::string bytes = idxBytes(0x0C, {3, 2}, std::string(24, '\0'));
  for (const auto& path : {write("h.idx", bytes), writeGz("h.idx.gz", bytes)}) {
    auto h = readIdxHeader(path);
    ASSERT_TRUE(h.ok()) << h.message();
    EXPECT_EQ(h->format, "idx");
    EXPECT_EQ(h->shape, (Shape{3, 2}));
    EXPECT_EQ(h->dtype, DType::kInt32);
  }
  // A plain file's size is checked against its header at once.
  auto h = readIdxHeader(write("cut.idx", bytes.substr(0, 20)));
  ASSERT_FALSE(h.ok());
  expectMentions(h.message(),
                 "cut.idx: truncated: the header promises 24 bytes of data after "
                 "byte 12 (shape [3, 2], int32), the file holds 8");
  h = readIdxHeader(write("magic.idx", "\x01\x02\x08\x01"));
  ASSERT_FALSE(h.ok());
  expectMentions(h.message(), "magic.idx: not an IDX file");
  // A gzip file cut inside its header.
  const std::string gz = writeGz("g.gz", bytes);
  std::ifstream in(gz, std::ios::binary);
  std::string z((std::istreambuf_iterator<char>(in)), {});
  h = readIdxHeader(write("gcut.gz", z.substr(0, 12)));
  ASSERT_FALSE(h.ok());
  expectMentions(h.message(), "gcut.gz: gzip stream is truncated at compressed byte");

  const std::string fm = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
  if (!fs::exists(fm)) GTEST_SKIP() << "dataset not installed";
  h = readIdxHeader(fm);
  ASSERT_TRUE(h.ok()) << h.message();
  EXPECT_EQ(h->shape, (Shape{60000, 28, 28}));
  EXPECT_EQ(h->dtype, DType::kUInt8);
}

TEST_F(DataTest, NpyBadHeadersAndHeaderOnly) {
  Tensor t = Tensor::fromVector<int16_t>({1, 2, 3, 4, 5, 6}, {3, 2});
  const std::string p = (dir_ / "a.npy").string();
  ASSERT_TRUE(writeNpy(p, t).ok());
  auto h = readNpyHeader(p);
  ASSERT_TRUE(h.ok()) << h.message();
  EXPECT_EQ(h->format, "npy");
  EXPECT_EQ(h->shape, (Shape{3, 2}));
  EXPECT_EQ(h->dtype, DType::kInt16);

  std::ifstream in(p, std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), {});
  auto withHeader = [&](const std::string& from, const std::string& to) {
    std::string b = good;
    const auto at = b.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    b.replace(at, from.size(), to + std::string(from.size() - to.size(), ' '));
    return b;
  };
  struct Case {
    std::string name, from, to, expect;
  };
  const std::vector<Case> cases = {
      {"shape.npy", "(3, 2)", "(3, x)", "shape.npy: NPY shape (3, x) in the header at byte 10"},
      {"neg.npy", "(3, 2)", "(-6,)", "neg.npy: NPY shape (-6,) in the header at byte 10"},
      {"descr.npy", "'<i2'", "'<c8'", "descr.npy: NPY dtype '<c8' in the header at byte 10"},
      {"nodict.npy", "{", "[", "nodict.npy: NPY header at byte 10 is not a Python dict"},
      {"noshape.npy", "'shape'", "'shope'", "noshape.npy: NPY header at byte 10 lacks shape"},
      {"fortran.npy", "False", "Maybe", "fortran.npy: NPY fortran_order 'Maybe'"},
      {"big.npy", "(3, 2)", "(3, 4)",
       "big.npy: truncated: the header promises 24 bytes of data after byte 128 (shape [3, 4], "
       "int16), the file holds 12"},
  };
  for (const auto& c : cases) {
    const std::string path = write(c.name, withHeader(c.from, c.to));
    for (const auto& message : {readNpy(path).message(), readNpyHeader(path).message()}) {
      expectMentions(message, c.expect);
      expectMentions(message, c.name == "descr.npy" ? "save it again" : "numpy");
    }
  }
  // A header length past the end of the file.
  std::string longHeader = good;
  longHeader[8] = static_cast<char>(0xff);
  longHeader[9] = static_cast<char>(0x7f);
  const std::string lp = write("len.npy", longHeader);
  for (const auto& message : {readNpy(lp).message(), readNpyHeader(lp).message()})
    expectMentions(message,
                   "len.npy: truncated: the NPY header (length 32767 at byte 8) needs "
                   "32777 bytes, the file holds " +
                       std::to_string(good.size()));
  auto r = readNpyHeader(write("x.npy", "hello"));
  ASSERT_FALSE(r.ok());
  expectMentions(r.message(), "x.npy: not an NPY file: it starts with 68 65 6C 6C 6F at byte 0");
}

// What numpy.save writes for dtypes our own writer never produces: the one codec reads them.
TEST_F(DataTest, NpyBigEndianStringsAndBfloat16) {
  auto npy = [](const std::string& descr, const std::string& shape, const std::string& data) {
    std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
    h += std::string(63 - (10 + h.size()) % 64, ' ') + "\n";
    return std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(h.size() & 0xff) +
           static_cast<char>(h.size() >> 8) + h + data;
  };
  // Big-endian int32 {258, -2} and float64 {1.5}.
  const std::string i4("\x00\x00\x01\x02\xff\xff\xff\xfe", 8);
  auto r = readNpy(write("be.npy", npy(">i4", "(2,)", i4)));
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->dtype(), DType::kInt32);
  EXPECT_EQ(r->toInt64Vector(), (std::vector<int64_t>{258, -2}));
  r = readNpy(write("be8.npy", npy(">f8", "()", std::string("\x3f\xf8\0\0\0\0\0\0", 8))));
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->getDouble(0), 1.5);

  // '<U3' (UTF-32, NUL-padded): "ab", "" and "e\u00e9\U0001F600", read as UTF-8.
  auto utf32 = [](std::vector<uint32_t> cps, bool big) {
    std::string s;
    for (uint32_t cp : cps)
      for (int k = 0; k < 4; ++k) s += static_cast<char>(cp >> (8 * (big ? 3 - k : k)));
    return s;
  };
  const std::vector<uint32_t> cps = {'a', 'b', 0, 0, 0, 0, 'e', 0xE9, 0x1F600};
  const std::vector<std::string> want = {"ab", "", "e\xC3\xA9\xF0\x9F\x98\x80"};
  for (bool big : {false, true}) {
    const std::string p = write("u.npy", npy(big ? ">U3" : "<U3", "(3,)", utf32(cps, big)));
    r = readNpy(p);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(r->dtype(), DType::kString);
    EXPECT_EQ(r->shape(), (Shape{3}));
    EXPECT_EQ(r->strings(), want);
    auto h = readNpyHeader(p);
    ASSERT_TRUE(h.ok()) << h.message();
    EXPECT_EQ(h->dtype, DType::kString);
    EXPECT_EQ(h->shape, (Shape{3}));
  }
  // Written back, the strings keep their characters: UTF-8 is stored as code points, and an
  // invalid byte (0xFF) stands for itself.
  const std::string sp = (dir_ / "s.npy").string();
  ASSERT_TRUE(writeNpy(sp, Tensor::fromStrings({"e\xC3\xA9\xF0\x9F\x98\x80", "x\xFF"}, {2})).ok());
  r = readNpy(sp);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->strings(), (std::vector<std::string>{"e\xC3\xA9\xF0\x9F\x98\x80", "x\xC3\xBF"}));
  // A string array cut short is reported as any other truncated array.
  r = readNpy(write("ucut.npy", npy("<U3", "(3,)", utf32(cps, false).substr(0, 30))));
  ASSERT_FALSE(r.ok());
  expectMentions(r.message(), "ucut.npy: truncated: the header promises 36 bytes of data");
  r = readNpy(write("uwide.npy", npy("<U2000000", "(1,)", "")));
  ASSERT_FALSE(r.ok());
  expectMentions(r.message(), "uwide.npy: NPY dtype '<U2000000' in the header at byte 10");

  // bfloat16 is written as ml_dtypes does ('|V2') and read back bit for bit.
  Tensor bf(DType::kBFloat16, {2, 2});
  const std::vector<float> values = {1.0f, -2.5f, 0.15625f, 3e38f};
  for (size_t i = 0; i < values.size(); ++i) bf.data<uint16_t>()[i] = floatToBf16(values[i]);
  const std::string bp = (dir_ / "bf.npy").string();
  ASSERT_TRUE(writeNpy(bp, bf).ok());
  std::ifstream in(bp, std::ios::binary);
  const std::string image((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(image.find("'descr': '|V2'"), std::string::npos);
  r = readNpy(bp);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->dtype(), DType::kBFloat16);
  EXPECT_EQ(r->shape(), (Shape{2, 2}));
  for (size_t i = 0; i < values.size(); ++i)
    EXPECT_EQ(r->data<uint16_t>()[i], bf.data<uint16_t>()[i]) << i;
}

TEST_F(DataTest, CsvErrorsNameLineAndColumn) {
  const std::string ragged =
      write("file.csv", "a,b,c,d,e\n1,2,3,4,5\n\n1,2,3,4,5\n1,2,3,4,5\n1,2,3,4,5\n1,2,3\n");
  auto r = readCsv(ragged);
  ASSERT_FALSE(r.ok());
  expectMentions(r.message(), "file.csv line 7: 3 fields, the header has 5");
  CsvOptions noHeader;
  noHeader.header = false;
  r = readCsv(write("nh.csv", "1,2\n3,4,5\n"), noHeader);
  ASSERT_FALSE(r.ok());
  expectMentions(r.message(), "nh.csv line 2: 3 fields, the first line has 2");
  r = readCsv(write("cell.csv", "a,b\n1,2\n3,4\n5,seven\n"));
  ASSERT_FALSE(r.ok());
  expectMentions(r.message(), "cell.csv line 4, column 2 ('b'): 'seven' is not a number");
  r = readCsv(write("gap.csv", "a,b\n1,\n"));
  ASSERT_FALSE(r.ok());
  expectMentions(r.message(), "gap.csv line 2, column 2 ('b') is empty");
  r = readCsv(write("empty.csv", ""));
  ASSERT_FALSE(r.ok());
  expectMentions(r.message(), "empty.csv: the file is empty");
  r = readCsv(write("blank.csv", "\n  \n"));
  ASSERT_FALSE(r.ok());
  expectMentions(r.message(), "blank.csv: the file is empty");
  r = readCsv(write("head.csv", "a,b\n"));
  ASSERT_FALSE(r.ok());
  expectMentions(r.message(), "head.csv: the header names 2 columns but no data rows");
  r = readCsv(write("quote.csv", "a,b\n1,\"2\n"));
  ASSERT_FALSE(r.ok());
  expectMentions(r.message(), "quote.csv line 2: a quoted field is not closed");
  CsvOptions o;
  o.labelColumn = "label";
  r = readCsv(write("frac.csv", "x,label\n1,0\n2,1.5\n"), o);
  ASSERT_FALSE(r.ok());
  expectMentions(r.message(), "frac.csv line 3, column 2 ('label'): label '1.5' is not a whole");
  o.labelColumn = "nope";
  r = readCsv(write("cols.csv", "x,label\n1,0\n"), o);
  ASSERT_FALSE(r.ok());
  expectMentions(r.message(), "cols.csv: label column 'nope' is neither a column name (x, label)");
}

TEST_F(DataTest, CsvFeatureColumnsColumnsAndHeaderOnly) {
  // A text column left out of the features does not have to be numeric; a BOM is not a name.
  const std::string p =
      write("iris.csv",
            "\xEF\xBB\xBFid,name,w,h,label\n0,setosa,1.5,2,0\n1,virginica,3,4.25,2\n"
            "2,versicolor,5,6,1\n");
  CsvOptions o;
  o.labelColumn = "label";
  o.featureColumns = {"h", "2"};  // by name and by index, in the order given
  auto r = readCsv(p, o);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->columns, (std::vector<std::string>{"id", "name", "w", "h", "label"}));
  EXPECT_EQ(r->featureNames, (std::vector<std::string>{"h", "w"}));
  EXPECT_EQ(r->features.shape(), (Shape{3, 2}));
  EXPECT_FLOAT_EQ(r->features.data<float>()[2], 4.25f);
  EXPECT_FLOAT_EQ(r->features.data<float>()[3], 3.f);
  EXPECT_EQ(r->labels->data<int64_t>()[1], 2);
  // Without featureColumns every other column is a feature, and the text one fails.
  o.featureColumns.clear();
  r = readCsv(p, o);
  ASSERT_FALSE(r.ok());
  expectMentions(r.message(), "iris.csv line 2, column 2 ('name'): 'setosa' is not a number");
  o.featureColumns = {"w"};
  o.maxRows = 2;
  r = readCsv(p, o);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->features.shape(), (Shape{2, 1}));
  CsvOptions nh;
  nh.header = false;
  r = readCsv(write("n.csv", "1,2,3\n4,5,6\n"), nh);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->columns, (std::vector<std::string>{"0", "1", "2"}));

  auto h = readCsvHeader(p);
  ASSERT_TRUE(h.ok()) << h.message();
  EXPECT_EQ(h->format, "csv");
  EXPECT_EQ(h->shape, (Shape{3, 5}));
  EXPECT_EQ(h->csvColumns, (std::vector<std::string>{"id", "name", "w", "h", "label"}));
  h = readCsvHeader(write("n2.csv", "1,2,3\n\n4,5,6\n"), nh);
  ASSERT_TRUE(h.ok()) << h.message();
  EXPECT_EQ(h->shape, (Shape{2, 3}));
  h = readCsvHeader(dir_.string());
  ASSERT_FALSE(h.ok());
  expectMentions(h.message(), ": is a folder");
  EXPECT_FALSE(readIdx(dir_.string()).ok());
  EXPECT_FALSE(readNpyHeader(dir_.string()).ok());
  h = readCsvHeader(write("e.csv", ""));
  ASSERT_FALSE(h.ok());
  expectMentions(h.message(), "e.csv: the file is empty");
}

TEST_F(DataTest, Normalization) {
  Tensor u = Tensor::fromVector<uint8_t>({0, 255, 51}, {3});
  auto n = normalize(u, {1.0 / 255, 0.5, 0.25});
  ASSERT_TRUE(n.ok());
  EXPECT_NEAR(n->data<float>()[0], -2.f, 1e-6);
  EXPECT_NEAR(n->data<float>()[1], 2.f, 1e-6);
  EXPECT_NEAR(n->data<float>()[2], (0.2f - 0.5f) / 0.25f, 1e-6);
  EXPECT_FALSE(normalize(u, {1, 0, 0}).ok());
}

Dataset toyDataset(int64_t n) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) {
    x.push_back(static_cast<float>(i));
    x.push_back(static_cast<float>(-i));
    y.push_back(i);
  }
  Dataset d;
  d.columns["x"] = Tensor::fromVector(x, {n, 2});
  d.columns["y"] = Tensor::fromVector(y, {n});
  return d;
}

TEST(BatchLoader, ShufflesDeterministicallyAndCoversEverySample) {
  auto d = std::make_shared<Dataset>(toyDataset(103));
  LoaderOptions o;
  o.batchSize = 10;
  o.seed = 42;
  o.prefetch = 2;
  BatchLoader loader(d, o);
  EXPECT_EQ(loader.batchesPerEpoch(), 11);
  auto epochOrder = [&](int64_t epoch) {
    std::vector<int64_t> order;
    loader.startEpoch(epoch);
    while (auto b = loader.next()) {
      EXPECT_EQ(b->inputs.at("x").dim(0), b->size);
      for (int64_t i = 0; i < b->size; ++i) {
        const int64_t id = b->inputs.at("y").data<int64_t>()[i];
        // Columns stay aligned: x row i belongs to the same sample as y[i].
        EXPECT_EQ(b->inputs.at("x").data<float>()[2 * i], static_cast<float>(id));
        order.push_back(id);
      }
    }
    return order;
  };
  const auto e0 = epochOrder(0), e0again = epochOrder(0), e1 = epochOrder(1);
  EXPECT_EQ(e0, e0again);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(std::set<int64_t>(e0.begin(), e0.end()).size(), 103u);
  std::vector<int64_t> sorted(103);
  for (int i = 0; i < 103; ++i) sorted[i] = i;
  EXPECT_NE(e0, sorted);
  // Resuming mid-epoch yields exactly the remaining batches.
  loader.startEpoch(1, 4);
  std::vector<int64_t> rest;
  while (auto b = loader.next())
    for (int64_t i = 0; i < b->size; ++i) rest.push_back(b->inputs.at("y").data<int64_t>()[i]);
  EXPECT_EQ(rest, std::vector<int64_t>(e1.begin() + 40, e1.end()));
  // Restarting while the worker is mid-epoch is safe.
  loader.startEpoch(2);
  ASSERT_TRUE(loader.next().has_value());
  loader.startEpoch(3);
  ASSERT_TRUE(loader.next().has_value());
}

TEST(BatchLoader, ReusesReleasedBatchStorageButNeverHeldOnes) {
  auto d = std::make_shared<Dataset>(toyDataset(200));
  LoaderOptions o;
  o.batchSize = 10;
  o.prefetch = 2;
  BatchLoader loader(d, o);
  // Held batches keep their contents while the loader goes on.
  loader.startEpoch(0);
  std::vector<Batch> held;
  while (auto b = loader.next()) held.push_back(std::move(*b));
  ASSERT_EQ(held.size(), 20u);
  std::set<const void*> storage;
  for (const auto& b : held) {
    storage.insert(b.inputs.at("x").raw());
    for (int64_t i = 0; i < b.size; ++i)
      EXPECT_EQ(b.inputs.at("x").data<float>()[2 * i],
                static_cast<float>(b.inputs.at("y").data<int64_t>()[i]));
  }
  EXPECT_EQ(storage.size(), 20u);  // nothing held was handed out again
  held.clear();
  // Released batches: their storage serves later ones, which must still be right.
  loader.startEpoch(1);
  int64_t batches = 0;
  while (auto b = loader.next()) {
    ++batches;
    for (int64_t i = 0; i < b->size; ++i)
      EXPECT_EQ(b->inputs.at("x").data<float>()[2 * i],
                static_cast<float>(b->inputs.at("y").data<int64_t>()[i]));
  }
  EXPECT_EQ(batches, 20);
}

// LoaderOptions::hostBuffers (page-locked memory for a trainer on a GPU) stores every new
// batch column; released ones are reused as before.
TEST(BatchLoader, StoresNewBatchesInTheGivenHostBuffers) {
  auto d = std::make_shared<Dataset>(toyDataset(200));
  LoaderOptions o;
  o.batchSize = 10;
  o.prefetch = 2;
  std::mutex m;
  std::set<const void*> given;
  o.hostBuffers = [&](size_t bytes) {
    auto b = std::make_shared<Buffer>(bytes);
    std::lock_guard<std::mutex> lock(m);
    given.insert(b->data);
    return b;
  };
  BatchLoader loader(d, o);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    loader.startEpoch(epoch);
    while (auto b = loader.next()) {
      for (const auto& [name, t] : b->inputs) {
        std::lock_guard<std::mutex> lock(m);
        EXPECT_TRUE(given.count(t.raw())) << name << " is not in a given buffer";
      }
      for (int64_t i = 0; i < b->size; ++i)
        EXPECT_EQ(b->inputs.at("x").data<float>()[2 * i],
                  static_cast<float>(b->inputs.at("y").data<int64_t>()[i]));
    }
  }
  // 60 batches of two columns were gathered; released storage served most of them (how many
  // buffers are live at once depends on the threads' timing: a few batches' worth).
  std::lock_guard<std::mutex> lock(m);
  EXPECT_GT(given.size(), 0u);
  EXPECT_LE(given.size(), 2u * (o.prefetch + 4));
}

TEST(BatchLoader, NoShuffleAndDropLast) {
  auto d = std::make_shared<Dataset>(toyDataset(25));
  LoaderOptions o;
  o.batchSize = 10;
  o.shuffle = false;
  o.dropLast = true;
  BatchLoader loader(d, o);
  EXPECT_EQ(loader.batchesPerEpoch(), 2);
  loader.startEpoch(0);
  auto b = loader.next();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->inputs.at("y").data<int64_t>()[3], 3);
  ASSERT_TRUE(loader.next().has_value());
  EXPECT_FALSE(loader.next().has_value());
}

TEST(Dataset, ValidateNamesMismatchedColumn) {
  Dataset d = toyDataset(5);
  d.columns["z"] = Tensor(DType::kFloat, {4, 1});
  Status st = d.validate();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'z'"), std::string::npos) << st.message();
}

TEST(Dataset, FashionMnistFromSpec) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(dir + "/t10k-images-idx3-ubyte.gz")) GTEST_SKIP() << "dataset not installed";
  DataFileSpec img;
  img.input = "image";
  img.path = "t10k-images-idx3-ubyte.gz";
  img.normalization = {1.0 / 255, 0, 1};
  img.shape = {1, 28, 28};
  DataFileSpec lab;
  lab.input = "label";
  lab.path = "t10k-labels-idx1-ubyte.gz";
  lab.dtype = "int64";
  auto d = loadDataset({img, lab}, dir);
  ASSERT_TRUE(d.ok()) << d.message();
  EXPECT_EQ(d->size(), 10000);
  EXPECT_EQ(d->columns.at("image").shape(), (Shape{10000, 1, 28, 28}));
  EXPECT_EQ(d->columns.at("image").dtype(), DType::kFloat);
  EXPECT_EQ(d->columns.at("label").dtype(), DType::kInt64);
  int64_t maxLabel = 0;
  for (int64_t i = 0; i < 10000; ++i)
    maxLabel = std::max(maxLabel, d->columns.at("label").data<int64_t>()[i]);
  EXPECT_EQ(maxLabel, 9);
  const float* px = d->columns.at("image").data<float>();
  float mx = 0;
  for (int64_t i = 0; i < 784 * 10; ++i) mx = std::max(mx, px[i]);
  EXPECT_LE(mx, 1.f);
  EXPECT_GT(mx, 0.5f);
}

}  // namespace
}  // namespace dw::engine::training
