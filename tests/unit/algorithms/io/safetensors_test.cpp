// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/safetensors.hpp"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "prsgd/algorithms/kws_model.hpp"
#include "prsgd/algorithms/model_registry.hpp"

namespace prsgd::algorithms {
namespace {

std::vector<unsigned char> floats(std::initializer_list<float> v) {
  std::vector<unsigned char> out(v.size() * sizeof(float));
  std::memcpy(out.data(), std::data(v), out.size());
  return out;
}

// A file from a raw header and data, as another writer might produce it.
std::vector<unsigned char> raw_file(const std::string& header, std::size_t data_bytes) {
  std::vector<unsigned char> out(8 + header.size() + data_bytes, 0);
  const std::uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

std::string decode_error(const std::vector<unsigned char>& bytes) {
  auto f = decode_safetensors(bytes);
  EXPECT_FALSE(f) << "decoded a malformed file";
  return f ? std::string{} : f.error().context;
}

st_file sample_file() {
  st_file f;
  f.metadata = {{"format", "pt"}, {"note", "quote \" and \\ and \n"}};
  f.tensors.push_back({"fc.weight", st_dtype::f32, {2, 3}, floats({1, 2, 3, 4, 5, 6})});
  f.tensors.push_back({"fc.bias", st_dtype::f32, {2}, floats({-1, 0.5F})});
  std::vector<unsigned char> count(8);
  const std::int64_t seven = 7;
  std::memcpy(count.data(), &seven, 8);
  f.tensors.push_back({"bn.num_batches_tracked", st_dtype::i64, {}, count});
  return f;
}

TEST(SafetensorsTest, RoundTripsTensorsAndMetadata) {
  const st_file f = sample_file();
  auto bytes = encode_safetensors(f);
  ASSERT_TRUE(bytes) << bytes.error().message();
  auto back = decode_safetensors(*bytes);
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->metadata, f.metadata);
  ASSERT_EQ(back->tensors.size(), 3U);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back->tensors[i].name, f.tensors[i].name);
    EXPECT_EQ(back->tensors[i].dtype, f.tensors[i].dtype);
    EXPECT_EQ(back->tensors[i].shape, f.tensors[i].shape);
    EXPECT_EQ(back->tensors[i].data, f.tensors[i].data);
  }
  ASSERT_NE(back->find("fc.bias"), nullptr);
  EXPECT_EQ(back->find("nope"), nullptr);
}

TEST(SafetensorsTest, WritesTheReferenceLayout) {
  auto bytes = encode_safetensors(sample_file());
  ASSERT_TRUE(bytes);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes->data(), 8);
  EXPECT_EQ(n % 8, 0U) << "header padded to 8 bytes";
  const std::string header(reinterpret_cast<const char*>(bytes->data() + 8), n);
  EXPECT_EQ(header.front(), '{');
  EXPECT_EQ(header.rfind("__metadata__", 0), std::string::npos);
  EXPECT_EQ(header.find("{\"__metadata__\":{"), 0U) << header;
  const auto last = header.find_last_not_of(' ');
  EXPECT_EQ(header[last], '}');
  EXPECT_NE(header.find("\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[2, 3],\"data_offsets\":[0,24]}"),
            std::string::npos)
      << header;
  EXPECT_NE(header.find("\"bn.num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]}"),
            std::string::npos)
      << header;
  EXPECT_EQ(bytes->size(), 8 + n + 40);
}

TEST(SafetensorsTest, ReadsAHeaderWrittenByAnotherWriter) {
  // Tensors listed out of data order, whitespace, escapes, an empty tensor: all valid.
  const std::string header =
      "{ \"b\" : {\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},\n"
      "  \"a\\u00e9\": {\"dtype\": \"I32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
      "  \"empty\": {\"dtype\": \"F16\", \"shape\": [0, 4], \"data_offsets\": [12, 12]},"
      "  \"__metadata__\": {\"format\": \"pt\"}}   ";
  auto bytes = raw_file(header, 12);
  auto f = decode_safetensors(bytes);
  ASSERT_TRUE(f) << f.error().message();
  ASSERT_EQ(f->tensors.size(), 3U);
  EXPECT_EQ(f->tensors[0].name, "a\xC3\xA9");
  EXPECT_EQ(f->tensors[1].name, "b");
  EXPECT_EQ(f->tensors[2].name, "empty");
  EXPECT_EQ(f->metadata.at("format"), "pt");
}

TEST(SafetensorsTest, RefusesMalformedFiles) {
  const std::string ok_entry = "\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
  EXPECT_NE(decode_error({1, 2, 3}).find("shorter than"), std::string::npos);
  {
    auto bytes = raw_file("{" + ok_entry + "}", 8);
    const std::uint64_t n = 1000;
    std::memcpy(bytes.data(), &n, 8);
    EXPECT_NE(decode_error(bytes).find("exceeds"), std::string::npos);
    const std::uint64_t huge = ~std::uint64_t{0};
    std::memcpy(bytes.data(), &huge, 8);
    EXPECT_NE(decode_error(bytes).find("limit"), std::string::npos);
  }
  EXPECT_NE(decode_error(raw_file("[" + ok_entry + "]", 8)).find("start"), std::string::npos);
  EXPECT_NE(decode_error(raw_file("{" + ok_entry, 8)).find("JSON"), std::string::npos);
  EXPECT_NE(decode_error(raw_file("{" + ok_entry + ",}", 8)).find("JSON"), std::string::npos);
  EXPECT_NE(decode_error(raw_file("{" + ok_entry + "," + ok_entry + "}", 8)).find("duplicate"), std::string::npos);
  EXPECT_NE(decode_error(raw_file("{" + ok_entry + "} x", 8)).find("trailing"), std::string::npos);
  EXPECT_NE(decode_error(raw_file("{\"t\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8)).find("dtype"),
            std::string::npos);
  EXPECT_NE(
      decode_error(raw_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8)).find("shape"),
      std::string::npos);
  EXPECT_NE(
      decode_error(raw_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8)).find("shape"),
      std::string::npos);
  EXPECT_NE(
      decode_error(raw_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8)).find("needs 12"),
      std::string::npos);
  EXPECT_NE(decode_error(raw_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8)).find("begin"),
            std::string::npos);
  EXPECT_NE(decode_error(raw_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8)).find("[begin"),
            std::string::npos);
  EXPECT_NE(decode_error(raw_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8)).find("needs dtype"),
            std::string::npos);
  EXPECT_NE(decode_error(raw_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8))
                .find("unknown field"),
            std::string::npos);
  // Shape product overflows 64 bits.
  EXPECT_NE(
      decode_error(raw_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8))
          .find("bytes"),
      std::string::npos);
  // Gap, overlap, and data left over or missing.
  const std::string a = "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}";
  EXPECT_NE(decode_error(raw_file("{" + a + ",\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12))
                .find("without gap"),
            std::string::npos);
  EXPECT_NE(decode_error(raw_file("{" + a + ",\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[2,10]}}", 10))
                .find("without gap"),
            std::string::npos);
  EXPECT_NE(decode_error(raw_file("{" + a + "}", 8)).find("cover"), std::string::npos);
  EXPECT_NE(decode_error(raw_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4)).find("cover"),
            std::string::npos);
  EXPECT_NE(decode_error(raw_file("{\"__metadata__\":{\"k\":1}}", 0)).find("string"), std::string::npos);
  EXPECT_NE(decode_error(raw_file("{\"__metadata__\":[]}", 0)).find("object"), std::string::npos);
  EXPECT_NE(decode_error(raw_file("{\"t\":\"x\"}", 0)).find("object"), std::string::npos);
  // A name the writer refuses (found by the safetensors fuzz target: a file the reader accepted could not be
  // written back).
  EXPECT_NE(
      decode_error(raw_file("{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4)).find("empty name"),
      std::string::npos);
  EXPECT_NE(decode_error(raw_file("{\"t\\ud800\":1}", 0)).find("surrogate"), std::string::npos);
  EXPECT_NE(decode_error(raw_file(std::string(100, '[') + std::string(100, ']'), 0)).find("start"), std::string::npos);
  EXPECT_NE(decode_error(raw_file("{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}", 0)).find("deeper"),
            std::string::npos);
}

TEST(SafetensorsTest, SurvivesCorruptedBytes) {
  auto good = encode_safetensors(sample_file());
  ASSERT_TRUE(good);
  std::mt19937_64 rng(42);
  std::size_t decoded = 0;
  for (int i = 0; i < 3000; ++i) {
    auto bytes = *good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      bytes[rng() % bytes.size()] = static_cast<unsigned char>(rng());
    }
    if (rng() % 4 == 0) {
      bytes.resize(rng() % bytes.size());
    }
    auto f = decode_safetensors(bytes);  // must return, never crash or read out of bounds
    decoded += f ? 1 : 0;
  }
  SCOPED_TRACE(decoded);
}

TEST(SafetensorsTest, EncodeRefusesInconsistentTensors) {
  st_file f = sample_file();
  f.tensors[1].name = "fc.weight";
  EXPECT_FALSE(encode_safetensors(f));
  f = sample_file();
  f.tensors[0].shape = {3, 3};
  EXPECT_FALSE(encode_safetensors(f));
  f = sample_file();
  f.tensors[0].name = "__metadata__";
  EXPECT_FALSE(encode_safetensors(f));
}

TEST(SafetensorsTest, WritesAndReadsFiles) {
  const auto path = std::filesystem::path(::testing::TempDir()) / "prsgd_safetensors_test.safetensors";
  ASSERT_TRUE(write_safetensors(path, sample_file()));
  auto f = read_safetensors(path);
  ASSERT_TRUE(f) << f.error().message();
  EXPECT_EQ(f->tensors.size(), 3U);
  std::filesystem::remove(path);
  auto missing = read_safetensors(path);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, errc::io_error);
}

// ---- models as named tensors ---------------------------------------------------------------------

std::unique_ptr<model> build(const std::string& name) {
  model_config cfg{{1, 28, 28}, 10, 3};
  if (name.rfind("kws", 0) == 0) {
    register_kws_models(model_registry::instance());
    cfg = {{1, 98, 40}, 12, 3};
  }
  auto m = model_registry::instance().make(name, cfg);
  EXPECT_TRUE(m) << name;
  return m ? std::move(*m) : nullptr;
}

std::vector<std::string> names_of(const model& m) {
  std::vector<std::string> out;
  for (const auto& t : m.tensors()) {
    out.push_back(t.name);
  }
  return out;
}

const tensor_info* find_tensor(const model& m, const std::string& name) {
  for (const auto& t : m.tensors()) {
    if (t.name == name) {
      return &t;
    }
  }
  return nullptr;
}

TEST(ModelTensorsTest, BuiltinModelsUsePytorchStateDictNames) {
  auto mlp = build("fmnist-mlp");
  EXPECT_EQ(names_of(*mlp),
            (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"}));
  EXPECT_EQ(mlp->tensors()[0].shape, (std::vector<std::int64_t>{512, 784}));
  auto cnn = build("fmnist-cnn");
  EXPECT_EQ(names_of(*cnn), (std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                                      "fc.weight", "fc.bias"}));
  EXPECT_EQ(cnn->tensors()[2].shape, (std::vector<std::int64_t>{32, 16, 5, 5}));
  EXPECT_EQ(cnn->tensors()[4].shape, (std::vector<std::int64_t>{10, 1568}));
  auto resnet = build("fmnist-resnet8");
  const auto rn = names_of(*resnet);
  ASSERT_GE(rn.size(), 12U);
  EXPECT_EQ(std::vector<std::string>(rn.begin(), rn.begin() + 12),
            (std::vector<std::string>{"conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var",
                                      "bn1.num_batches_tracked", "layer1.0.conv1.weight", "layer1.0.bn1.weight",
                                      "layer1.0.bn1.bias", "layer1.0.bn1.running_mean", "layer1.0.bn1.running_var",
                                      "layer1.0.bn1.num_batches_tracked"}));
  const auto* proj = find_tensor(*resnet, "layer2.0.shortcut.0.weight");
  ASSERT_NE(proj, nullptr);
  EXPECT_EQ(proj->shape, (std::vector<std::int64_t>{32, 16, 1, 1}));
  EXPECT_NE(find_tensor(*resnet, "layer3.0.shortcut.1.running_var"), nullptr);
  EXPECT_EQ(find_tensor(*resnet, "layer1.0.shortcut.0.weight"), nullptr) << "identity shortcut";
  EXPECT_EQ(rn.back(), "fc.bias");
  auto resnet20 = build("fmnist-resnet");
  EXPECT_NE(find_tensor(*resnet20, "layer3.2.bn2.running_mean"), nullptr);
  auto kws = build("kws-cnn");
  EXPECT_EQ(names_of(*kws).front(), "conv1.weight");
  EXPECT_EQ(kws->tensors().front().shape, (std::vector<std::int64_t>{16, 1, 3, 3}));
  EXPECT_NE(find_tensor(*kws, "bn3.num_batches_tracked"), nullptr);
  EXPECT_EQ(names_of(*kws).back(), "fc.bias");
}

TEST(ModelTensorsTest, TensorsTileTheFlatBufferOfEveryBuiltinModel) {
  for (const std::string name : {"fmnist-mlp", "fmnist-cnn", "fmnist-resnet8", "fmnist-resnet", "kws-cnn"}) {
    auto m = build(name);
    std::vector<int> hits(m->num_params(), 0);
    for (const auto& t : m->tensors()) {
      if (t.role == tensor_role::counter) {
        continue;
      }
      ASSERT_LE(t.offset + t.size(), m->num_params()) << name << " " << t.name;
      EXPECT_EQ(t.role == tensor_role::buffer, t.offset >= m->num_trainable()) << name << " " << t.name;
      for (std::size_t i = t.offset; i < t.offset + t.size(); ++i) {
        ++hits[i];
      }
    }
    EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; })) << name;
  }
}

TEST(ModelTensorsTest, ExportThenImportIsBitIdenticalForEveryBuiltinModel) {
  for (const std::string name : {"fmnist-mlp", "fmnist-cnn", "fmnist-resnet8", "fmnist-resnet", "kws-cnn"}) {
    auto m = build(name);
    std::vector<float> params(m->params().begin(), m->params().end());
    std::mt19937 rng(7);
    std::normal_distribution<float> noise;
    for (auto& p : params) {
      p += noise(rng);  // every value distinct from the initialisation, buffers included
    }
    auto exported = export_tensors(*m, params, 5, {{"format", "pt"}});
    ASSERT_TRUE(exported) << name;
    auto bytes = encode_safetensors(*exported);
    ASSERT_TRUE(bytes) << name;
    auto decoded = decode_safetensors(*bytes);
    ASSERT_TRUE(decoded) << name;
    auto imported = import_tensors(*build(name), *decoded);
    ASSERT_TRUE(imported) << name << ": " << imported.error().message();
    ASSERT_EQ(imported->size(), params.size());
    EXPECT_EQ(std::memcmp(imported->data(), params.data(), params.size() * sizeof(float)), 0) << name;
  }
}

TEST(ModelTensorsTest, ExportWritesPytorchLayoutAndCounters) {
  auto m = build("fmnist-resnet8");
  std::vector<float> params(m->num_params());
  for (std::size_t i = 0; i < params.size(); ++i) {
    params[i] = static_cast<float>(i);
  }
  auto f = export_tensors(*m, params, 42);
  ASSERT_TRUE(f);
  const auto* rv = f->find("bn1.running_var");
  const auto* info = find_tensor(*m, "bn1.running_var");
  ASSERT_NE(rv, nullptr);
  ASSERT_NE(info, nullptr);
  float first = 0;
  std::memcpy(&first, rv->data.data(), sizeof(float));
  EXPECT_EQ(first, static_cast<float>(info->offset));
  EXPECT_GE(info->offset, m->num_trainable());
  const auto* counter = f->find("bn1.num_batches_tracked");
  ASSERT_NE(counter, nullptr);
  EXPECT_EQ(counter->dtype, st_dtype::i64);
  EXPECT_TRUE(counter->shape.empty());
  std::int64_t tracked = 0;
  std::memcpy(&tracked, counter->data.data(), 8);
  EXPECT_EQ(tracked, 42);
  EXPECT_FALSE(export_tensors(*m, std::vector<float>(3)));
}

TEST(ModelTensorsTest, ImportRefusesWeightsOfAnotherShapeOrName) {
  auto cnn = build("fmnist-cnn");
  auto good = export_tensors(*cnn, cnn->params());
  ASSERT_TRUE(good);
  auto missing = *good;
  missing.tensors.pop_back();
  auto r = import_tensors(*cnn, missing);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().context.find("fc.bias is missing"), std::string::npos) << r.error().context;
  auto extra = *good;
  extra.tensors.push_back({"fc.extra", st_dtype::f32, {1}, floats({1})});
  r = import_tensors(*cnn, extra);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().context.find("unexpected tensor fc.extra"), std::string::npos);
  auto mlp = build("fmnist-mlp");
  r = import_tensors(*mlp, *good);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().context.find("fc1.weight is missing"), std::string::npos);
  auto reshaped = *good;
  reshaped.tensors[0].shape = {16, 25};
  r = import_tensors(*cnn, reshaped);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().context.find("shape [16, 25], expected [16, 1, 5, 5]"), std::string::npos) << r.error().context;
  auto retyped = *good;
  retyped.tensors[1].dtype = st_dtype::i32;
  r = import_tensors(*cnn, retyped);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().context.find("is I32, expected F32"), std::string::npos);
}

TEST(ModelTensorsTest, UnnamedLayersGetSequentialDefaultNames) {
  network_builder b({1, 8, 8});
  b.conv2d(4, 3, 1, 1).relu().max_pool(2).batch_norm().flatten().linear(5).relu().linear(3).named("head");
  auto m = model::make("plain", {1, 8, 8}, 3, b.take(), 1);
  ASSERT_TRUE(m);
  EXPECT_EQ(names_of(**m),
            (std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias",
                                      "layers.1.running_mean", "layers.1.running_var", "layers.1.num_batches_tracked",
                                      "layers.2.weight", "layers.2.bias", "head.weight", "head.bias"}));
  EXPECT_EQ(names_of(*(*m)->clone()), names_of(**m));
}

TEST(ModelTensorsTest, DuplicateNamesAreRefused) {
  network_builder b({4, 1, 1});
  b.linear(4).named("fc").relu().linear(2).named("fc");
  auto m = model::make("dup", {4, 1, 1}, 2, b.take(), 1);
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().context.find("two tensors named fc.weight"), std::string::npos);
}

}  // namespace
}  // namespace prsgd::algorithms
