// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/codec.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>

#include <msgpack.hpp>

namespace prsgd::actors {
namespace {

flat_buffer model_of(std::size_t n) {
  auto v = std::make_shared<std::vector<float>>(n);
  for (std::size_t i = 0; i < n; ++i) {
    (*v)[i] = static_cast<float>(i) * 0.5f - 3.0f;
  }
  return v;
}

TEST(CodecTest, ModelRoundTripSharesPayloadOnSend) {
  model_msg m;
  m.member = 7;
  m.incarnation = 3;
  m.averager_incarnation = 2;
  m.round = 41;
  m.steps = 8;
  m.samples = 512;
  m.loss_sum = 123.5;
  m.loss_count = 512;
  m.params = model_of(1000);
  multipart wire = encode(to_averager{m});
  ASSERT_EQ(wire.size(), 2u);
  // Zero-copy on send: the payload frame points into the model's own memory.
  EXPECT_EQ(static_cast<const void*>(wire[1].data()), static_cast<const void*>(m.params->data()));
  EXPECT_EQ(payload_bytes(wire), 4000u);
  auto back = decode_to_averager(wire);
  ASSERT_TRUE(back) << back.error().message();
  const auto& d = std::get<model_msg>(*back);
  EXPECT_EQ(d.member, 7u);
  EXPECT_EQ(d.incarnation, 3u);
  EXPECT_EQ(d.averager_incarnation, 2u);
  EXPECT_EQ(d.round, 41u);
  EXPECT_EQ(d.steps, 8u);
  EXPECT_EQ(d.samples, 512u);
  EXPECT_DOUBLE_EQ(d.loss_sum, 123.5);
  EXPECT_FALSE(d.is_gradient);
  EXPECT_EQ(*d.params, *m.params);
}

TEST(CodecTest, EveryWorkerMessageRoundTrips) {
  welcome_msg w{1, 2, 3, 4, 5, training_mode::minibatch_sgd, 99, std::chrono::milliseconds(250)};
  auto wb = decode_to_worker(encode(to_worker{w}));
  ASSERT_TRUE(wb);
  const auto& wd = std::get<welcome_msg>(*wb);
  EXPECT_EQ(wd.admitted_round, 5u);
  EXPECT_EQ(wd.mode, training_mode::minibatch_sgd);
  EXPECT_EQ(wd.model_size, 99u);
  EXPECT_EQ(wd.heartbeat_interval, std::chrono::milliseconds(250));

  restart_msg r;
  r.member = 9;
  r.round = 12;
  r.model = model_of(17);
  r.interval = 16;
  r.step_size = 0.05;
  auto rb = decode_to_worker(encode(to_worker{r}));
  ASSERT_TRUE(rb);
  const auto& rd = std::get<restart_msg>(*rb);
  EXPECT_EQ(rd.interval, 16u);
  EXPECT_DOUBLE_EQ(rd.step_size, 0.05);
  EXPECT_EQ(*rd.model, *r.model);

  EXPECT_TRUE(
      std::holds_alternative<heartbeat_msg>(*decode_to_worker(encode(to_worker{heartbeat_msg{1, 1, 1, 1, true}}))));
  EXPECT_TRUE(std::holds_alternative<removed_msg>(*decode_to_worker(encode(to_worker{removed_msg{1, 1, 1, 1}}))));
  EXPECT_TRUE(std::holds_alternative<stop_msg>(*decode_to_worker(encode(to_worker{stop_msg{1, 1, 1, 1}}))));
  auto jb = decode_to_averager(encode(to_averager{join_msg{4, 5, 6, 7, 123.0}}));
  ASSERT_TRUE(jb);
  EXPECT_DOUBLE_EQ(std::get<join_msg>(*jb).speed_hint, 123.0);
  EXPECT_TRUE(std::holds_alternative<leave_msg>(*decode_to_averager(encode(to_averager{leave_msg{1, 1, 1, 1}}))));
}

TEST(CodecTest, RestartCarriesItsSampleRangesAsPairs) {
  restart_msg r;
  r.member = 3;
  r.model = model_of(4);
  r.ranges = {{0, 256}, {1024, 1100}, {59'900, 60'000}};
  const auto wire = encode(to_worker{r});
  auto back = decode_to_worker(wire);
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(std::get<restart_msg>(*back).ranges, r.ranges);
  // On the wire: the key "ranges", an array of [begin, end] arrays.
  auto h = msgpack::unpack(reinterpret_cast<const char*>(wire[0].data()), wire[0].size());
  std::map<std::string, msgpack::object> fields;
  h.get().convert(fields);
  ASSERT_TRUE(fields.contains("ranges"));
  const auto& arr = fields["ranges"];
  ASSERT_EQ(arr.type, msgpack::type::ARRAY);
  ASSERT_EQ(arr.via.array.size, 3u);
  ASSERT_EQ(arr.via.array.ptr[1].type, msgpack::type::ARRAY);
  EXPECT_EQ(arr.via.array.ptr[1].via.array.ptr[0].as<std::uint64_t>(), 1024u);
  // The most ranges the averager sends fit the header limit.
  r.ranges.clear();
  for (std::uint64_t k = 0; k < max_restart_ranges; ++k) {
    r.ranges.emplace_back(std::uint64_t{1} << 40U | k * 2, (std::uint64_t{1} << 40U | k * 2) + 1);
  }
  back = decode_to_worker(encode(to_worker{r}));
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(std::get<restart_msg>(*back).ranges.size(), max_restart_ranges);
  // An empty range is refused.
  r.ranges = {{5, 5}};
  back = decode_to_worker(encode(to_worker{r}));
  ASSERT_FALSE(back);
  EXPECT_EQ(back.error().code, errc::decode_failed);
}

TEST(CodecTest, SpecRequestAndReplyRoundTrip) {
  auto req = decode_to_averager(encode(to_averager{spec_request_msg{0, 77, 0, 0}}));
  ASSERT_TRUE(req) << req.error().message();
  EXPECT_EQ(std::get<spec_request_msg>(*req).incarnation, 77u);

  spec_reply_msg r;
  r.incarnation = 77;
  r.averager_incarnation = 5;
  r.round = 3;
  r.spec.model = "mlp:784-24-10 in=1x28x28 out=10 params=19090";
  r.spec.data = "fashion-mnist n=60000 shape=1x28x28 classes=10";
  r.spec.batch_size = 24;
  r.spec.seed = 11;
  r.spec.model_name = "mlp:784-24-10";
  r.spec.dataset = "csv";
  r.spec.data_options = {"label-column=last", "classes=10"};
  r.spec.non_iid = true;
  r.spec.dirichlet_alpha = 0.25;
  r.spec.lr = 0.07;
  r.spec.momentum = 0.5;
  r.spec.keep_momentum = false;
  r.spec.wire = algorithms::wire_dtype::int8;
  r.mode = training_mode::minibatch_sgd;
  r.model_size = 19090;
  auto back = decode_to_operator(encode(to_operator{r}));
  ASSERT_TRUE(back) << back.error().message();
  const auto& d = std::get<spec_reply_msg>(*back);
  EXPECT_EQ(d.incarnation, 77u);
  EXPECT_EQ(d.averager_incarnation, 5u);
  EXPECT_EQ(d.spec, r.spec);
  EXPECT_EQ(d.mode, training_mode::minibatch_sgd);
  EXPECT_EQ(d.model_size, 19090u);
  // Neither side takes the other's message.
  EXPECT_EQ(decode_to_worker(encode(to_operator{r})).error().code, errc::protocol_error);
  EXPECT_EQ(decode_to_operator(encode(to_averager{spec_request_msg{}})).error().code, errc::protocol_error);
}

TEST(CodecTest, SpecThatCannotTravelWholeIsRefused) {
  job_spec spec;
  spec.model_name = std::string(256, 'm');
  EXPECT_TRUE(check_spec_fits(spec));
  spec.model_name += "m";
  EXPECT_EQ(check_spec_fits(spec).error().code, errc::invalid_argument);
  spec.model_name = "fmnist-mlp";
  spec.data_options.assign(513, "k=v");
  EXPECT_FALSE(check_spec_fits(spec));
  spec.data_options = {"k=" + std::string(300, 'v')};
  EXPECT_FALSE(check_spec_fits(spec));
}

TEST(CodecTest, RejectsMessagesForTheOtherSide) {
  auto r = decode_to_averager(encode(to_worker{stop_msg{1, 1, 1, 1}}));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::protocol_error);
  auto w = decode_to_worker(encode(to_averager{leave_msg{1, 1, 1, 1}}));
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code, errc::protocol_error);
}

TEST(CodecTest, RejectsPayloadSizeThatDisagreesWithHeader) {
  model_msg m;
  m.params = model_of(10);
  multipart wire = encode(to_averager{m});
  wire[1] = frame::copy(wire[1].data(), 36);  // 9 floats, header says 10
  auto r = decode_to_averager(wire);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::protocol_error);
  wire.pop_back();  // no payload at all
  EXPECT_EQ(decode_to_averager(wire).error().code, errc::protocol_error);
  auto extra = encode(to_averager{leave_msg{1, 1, 1, 1}});
  extra.push_back(frame::copy("x"));
  EXPECT_EQ(decode_to_averager(extra).error().code, errc::protocol_error);
}

TEST(CodecTest, RejectsOversizedModelBeforeCopying) {
  model_msg m;
  m.params = model_of(100);
  codec_limits limits;
  limits.max_model_floats = 99;
  auto r = decode_to_averager(encode(to_averager{m}), limits);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::too_large);
}

TEST(CodecTest, RejectsWrongVersionAndUnknownType) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(2);
  pk.pack(std::string{"v"});
  pk.pack(protocol_version + 1);
  pk.pack(std::string{"t"});
  pk.pack(3);
  auto r = decode_to_averager({frame::copy(buf.data(), buf.size())});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::protocol_error);
  EXPECT_NE(r.error().context.find("version"), std::string::npos);

  msgpack::sbuffer buf2;
  msgpack::packer<msgpack::sbuffer> pk2(buf2);
  pk2.pack_map(2);
  pk2.pack(std::string{"v"});
  pk2.pack(protocol_version);
  pk2.pack(std::string{"t"});
  pk2.pack(200);
  EXPECT_EQ(decode_to_averager({frame::copy(buf2.data(), buf2.size())}).error().code, errc::protocol_error);
}

TEST(CodecTest, RejectsWrongFieldTypes) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(6);
  pk.pack(std::string{"v"});
  pk.pack(protocol_version);
  pk.pack(std::string{"t"});
  pk.pack(3);  // leave
  pk.pack(std::string{"m"});
  pk.pack(std::string{"not a number"});
  pk.pack(std::string{"i"});
  pk.pack(1);
  pk.pack(std::string{"a"});
  pk.pack(1);
  pk.pack(std::string{"r"});
  pk.pack(1);
  auto r = decode_to_averager({frame::copy(buf.data(), buf.size())});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::decode_failed);
}

TEST(CodecTest, RandomBytesNeverCrash) {
  std::mt19937 rng(12345);
  const int iterations = 4000;
  int accepted = 0;
  for (int i = 0; i < iterations; ++i) {
    std::string bytes(rng() % 64, '\0');
    for (auto& c : bytes) {
      c = static_cast<char>(rng());
    }
    multipart msg{frame::copy(bytes)};
    if (rng() % 2 == 0) {
      msg.push_back(frame::copy(bytes));
    }
    accepted += decode_to_averager(msg).has_value() ? 1 : 0;
    accepted += decode_to_worker(msg).has_value() ? 1 : 0;
  }
  EXPECT_EQ(accepted, 0) << "random bytes decoded as a valid message; seed 12345";
  EXPECT_FALSE(decode_to_averager({}).has_value());
  EXPECT_FALSE(decode_to_averager({frame{}}).has_value());
}

TEST(CodecTest, TruncatedValidHeaderIsRejected) {
  model_msg m;
  m.params = model_of(4);
  multipart wire = encode(to_averager{m});
  for (std::size_t cut = 1; cut < wire[0].size(); ++cut) {
    multipart t{frame::copy(wire[0].data(), cut), wire[1]};
    EXPECT_FALSE(decode_to_averager(t).has_value()) << "cut at " << cut;
  }
}

}  // namespace
}  // namespace prsgd::actors

namespace prsgd::actors {
namespace {

TEST(CodecTest, WelcomeCarriesTheOwnersAndTheirUploadBuffer) {
  welcome_msg w{1, 2, 3, 4, 5, training_mode::restarted_sgd, 99, std::chrono::milliseconds(250)};
  auto plain = decode_to_worker(encode(to_worker{w}));
  ASSERT_TRUE(plain) << plain.error().message();
  EXPECT_TRUE(std::get<welcome_msg>(*plain).owners.empty());
  EXPECT_EQ(std::get<welcome_msg>(*plain).upload_buffer, 0U);  // absent: the kernel's autotuning

  w.owners = {"tcp://10.0.0.2:7000", "tcp://10.0.0.3:7000"};
  w.upload_buffer = 32768;
  auto wb = decode_to_worker(encode(to_worker{w}));
  ASSERT_TRUE(wb) << wb.error().message();
  const auto& wd = std::get<welcome_msg>(*wb);
  EXPECT_EQ(wd.owners, w.owners);
  EXPECT_EQ(wd.upload_buffer, 32768U);
}

TEST(CodecTest, IdentityFieldsRoundTrip) {
  welcome_msg w{1, 2, 3, 4, 5, training_mode::restarted_sgd, 99, std::chrono::milliseconds(250)};
  w.token = 0xFEEDFACECAFEBEEFULL;
  w.shard_index = 2;
  w.num_shards = 3;
  w.spec = job_spec{"fmnist-mlp in=1x28x28 out=10 params=203530", "fashion-mnist n=60000", 64, 7};
  auto wb = decode_to_worker(encode(to_worker{w}));
  ASSERT_TRUE(wb) << wb.error().message();
  const auto& wd = std::get<welcome_msg>(*wb);
  EXPECT_EQ(wd.token, w.token);
  EXPECT_EQ(wd.shard_index, 2U);
  EXPECT_EQ(wd.num_shards, 3U);
  EXPECT_EQ(wd.spec.model, w.spec.model);
  EXPECT_EQ(wd.spec.data, w.spec.data);
  EXPECT_EQ(wd.spec.batch_size, 64U);
  EXPECT_EQ(wd.spec.seed, 7U);

  w.shard_index = 3;  // not below num_shards
  EXPECT_EQ(decode_to_worker(encode(to_worker{w})).error().code, errc::decode_failed);

  auto rb = decode_to_worker(encode(to_worker{refused_msg{0, 5, 1, 0, "model mismatch: a vs b"}}));
  ASSERT_TRUE(rb) << rb.error().message();
  EXPECT_EQ(std::get<refused_msg>(*rb).reason, "model mismatch: a vs b");
  EXPECT_EQ(std::get<refused_msg>(*rb).incarnation, 5U);

  auto jb = decode_to_averager(encode(to_averager{join_msg{0, 5, 0, 0, 1.0, "m", "d"}}));
  ASSERT_TRUE(jb);
  EXPECT_EQ(std::get<join_msg>(*jb).model_fingerprint, "m");
  EXPECT_EQ(std::get<join_msg>(*jb).data_fingerprint, "d");

  model_msg m;
  m.member = 4;
  m.token = 77;
  m.cut = true;
  m.steps = 1;
  m.samples = 1;
  m.params = std::make_shared<const std::vector<float>>(2, 1.0F);
  auto mb = decode_to_averager(encode(to_averager{m}));
  ASSERT_TRUE(mb);
  EXPECT_EQ(std::get<model_msg>(*mb).token, 77U);
  EXPECT_TRUE(std::get<model_msg>(*mb).cut);
  auto lb = decode_to_averager(encode(to_averager{leave_msg{4, 5, 1, 0, 99}}));
  ASSERT_TRUE(lb);
  EXPECT_EQ(std::get<leave_msg>(*lb).token, 99U);
  auto hb = decode_to_averager(encode(to_averager{heartbeat_msg{4, 5, 1, 0, false, 98}}));
  ASSERT_TRUE(hb);
  EXPECT_EQ(std::get<heartbeat_msg>(*hb).token, 98U);
}

TEST(CodecTest, JoinCarriesAnOptionalInitialModel) {
  join_msg bare{0, 77, 0, 0, 1.5, "external params=10", "external n=100"};
  const auto bare_wire = encode(to_averager{bare});
  ASSERT_EQ(bare_wire.size(), 1U);
  auto b = decode_to_averager(bare_wire);
  ASSERT_TRUE(b) << b.error().message();
  EXPECT_EQ(std::get<join_msg>(*b).initial_model, nullptr);

  join_msg with = bare;
  with.initial_model = model_of(10);
  const auto wire = encode(to_averager{with});
  ASSERT_EQ(wire.size(), 2U);
  auto d = decode_to_averager(wire);
  ASSERT_TRUE(d) << d.error().message();
  const auto& j = std::get<join_msg>(*d);
  ASSERT_NE(j.initial_model, nullptr);
  EXPECT_EQ(*j.initial_model, *with.initial_model);
  EXPECT_EQ(j.model_fingerprint, "external params=10");

  auto cut = wire;
  cut[1] = frame::copy(wire[1].data(), 36);  // 9 floats, the header says 10
  EXPECT_EQ(decode_to_averager(cut).error().code, errc::protocol_error);
  auto missing = wire;
  missing.pop_back();
  EXPECT_EQ(decode_to_averager(missing).error().code, errc::protocol_error);
}

TEST(CodecTest, EvaluatorMessagesRoundTripAndGoOneWay) {
  auto hello = decode_to_averager(encode(to_averager{evaluator_hello_msg{0, 5, 2, 0, "external params=3"}}));
  ASSERT_TRUE(hello) << hello.error().message();
  EXPECT_EQ(std::get<evaluator_hello_msg>(*hello).incarnation, 5U);
  EXPECT_EQ(std::get<evaluator_hello_msg>(*hello).model_fingerprint, "external params=3");

  auto result = decode_to_averager(encode(to_averager{evaluation_msg{0, 5, 2, 12, 9, 0.8125}}));
  ASSERT_TRUE(result) << result.error().message();
  const auto& r = std::get<evaluation_msg>(*result);
  EXPECT_EQ(r.request, 9U);
  EXPECT_EQ(r.round, 12U);
  EXPECT_DOUBLE_EQ(r.accuracy, 0.8125);

  evaluate_msg ask{0, 5, 2, 12, 9, model_of(3)};
  const auto wire = encode(to_evaluator{ask});
  ASSERT_EQ(wire.size(), 2U);
  EXPECT_EQ(static_cast<const void*>(wire[1].data()), static_cast<const void*>(ask.model->data()));
  auto e = decode_to_evaluator(wire);
  ASSERT_TRUE(e) << e.error().message();
  EXPECT_EQ(std::get<evaluate_msg>(*e).request, 9U);
  EXPECT_EQ(*std::get<evaluate_msg>(*e).model, *ask.model);
  auto stop = decode_to_evaluator(encode(to_evaluator{stop_msg{0, 5, 2, 12}}));
  ASSERT_TRUE(stop);
  EXPECT_TRUE(std::holds_alternative<stop_msg>(*stop));

  // Each side takes only its own messages.
  EXPECT_EQ(decode_to_worker(wire).error().code, errc::protocol_error);
  EXPECT_EQ(decode_to_averager(wire).error().code, errc::protocol_error);
  EXPECT_EQ(decode_to_evaluator(encode(to_worker{removed_msg{1, 1, 1, 1}})).error().code, errc::protocol_error);
  EXPECT_EQ(decode_to_worker(encode(to_averager{evaluation_msg{0, 5, 2, 12, 9, 0.5}})).error().code,
            errc::protocol_error);
}

// Packs an EVALUATION header by hand, as an evaluator written before (or without) the loss field would.
multipart evaluation_header(int entries, const std::function<void(msgpack::packer<msgpack::sbuffer>&)>& extra) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(static_cast<std::uint32_t>(8 + entries));
  const auto put = [&](const char* k, auto v) {
    pk.pack(std::string{k});
    pk.pack(v);
  };
  put("v", protocol_version);
  put("t", 16);  // EVALUATION
  put("m", 0);
  put("i", 5);
  put("a", 2);
  put("r", 12);
  put("q", 9);
  put("acc", 0.75);
  extra(pk);
  return {frame::copy(buf.data(), buf.size())};
}

TEST(CodecTest, EvaluationCarriesAnOptionalLoss) {
  evaluation_msg with{0, 5, 2, 12, 9, 0.8125, 0.4375};
  auto r = decode_to_averager(encode(to_averager{with}));
  ASSERT_TRUE(r) << r.error().message();
  ASSERT_TRUE(std::get<evaluation_msg>(*r).loss.has_value());
  EXPECT_DOUBLE_EQ(*std::get<evaluation_msg>(*r).loss, 0.4375);
  EXPECT_DOUBLE_EQ(std::get<evaluation_msg>(*r).accuracy, 0.8125);

  // Without a loss the header has no such key at all: an averager of the same version that predates the
  // field reads it as before.
  const auto wire = encode(to_averager{evaluation_msg{0, 5, 2, 12, 9, 0.8125}});
  const std::string header(reinterpret_cast<const char*>(wire[0].data()), wire[0].size());
  EXPECT_EQ(header.find("loss"), std::string::npos);
  auto without = decode_to_averager(wire);
  ASSERT_TRUE(without) << without.error().message();
  EXPECT_FALSE(std::get<evaluation_msg>(*without).loss.has_value());
}

TEST(CodecTest, EvaluationFromAnEvaluatorWithoutLossDecodesWithNone) {
  auto old = decode_to_averager(evaluation_header(0, [](auto&) {}));
  ASSERT_TRUE(old) << old.error().message();
  EXPECT_DOUBLE_EQ(std::get<evaluation_msg>(*old).accuracy, 0.75);
  EXPECT_FALSE(std::get<evaluation_msg>(*old).loss.has_value());

  // An integer loss is a number too (msgpack writers may pack 2.0 as 2).
  auto whole = decode_to_averager(evaluation_header(1, [](auto& pk) {
    pk.pack(std::string{"loss"});
    pk.pack(2);
  }));
  ASSERT_TRUE(whole) << whole.error().message();
  EXPECT_DOUBLE_EQ(std::get<evaluation_msg>(*whole).loss.value_or(-1), 2.0);

  auto text = decode_to_averager(evaluation_header(1, [](auto& pk) {
    pk.pack(std::string{"loss"});
    pk.pack(std::string{"low"});
  }));
  ASSERT_FALSE(text);
  EXPECT_EQ(text.error().code, errc::decode_failed);
}

}  // namespace
}  // namespace prsgd::actors

namespace prsgd::actors {
namespace {

std::vector<float> quantized(algorithms::wire_dtype dtype) {
  std::vector<float> v(300);
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = 1e-3F * static_cast<float>(i % 17) - 4e-3F;
  }
  return algorithms::quantize(v, dtype);
}

TEST(CodecWireDtypeTest, ModelAndRestartPayloadsRoundTripInEveryDtype) {
  for (const auto dtype : {algorithms::wire_dtype::f32, algorithms::wire_dtype::bf16, algorithms::wire_dtype::f16,
                           algorithms::wire_dtype::int8}) {
    SCOPED_TRACE(std::string{algorithms::to_string(dtype)});
    const auto v = quantized(dtype);
    model_msg m;
    m.member = 2;
    m.round = 5;
    m.steps = 1;
    m.samples = 1;
    m.dtype = dtype;
    m.delta = dtype != algorithms::wire_dtype::f32;
    m.params = std::make_shared<const std::vector<float>>(v);
    const auto frames = encode(to_averager{m});
    ASSERT_EQ(frames.size(), 2U);
    EXPECT_EQ(payload_bytes(frames), algorithms::encoded_size(dtype, v.size()));
    auto mb = decode_to_averager(frames);
    ASSERT_TRUE(mb) << mb.error().message();
    const auto& mm = std::get<model_msg>(*mb);
    EXPECT_EQ(mm.dtype, dtype);
    EXPECT_EQ(mm.delta, m.delta);
    EXPECT_EQ(*mm.params, v) << "quantised values travel exactly";

    restart_msg r;
    r.member = 2;
    r.round = 6;
    r.model = std::make_shared<const std::vector<float>>(v);
    r.dtype = dtype;
    if (dtype != algorithms::wire_dtype::f32) {
      r.base = 5;
    }
    auto rb = decode_to_worker(encode(to_worker{r}));
    ASSERT_TRUE(rb) << rb.error().message();
    const auto& rr = std::get<restart_msg>(*rb);
    EXPECT_EQ(rr.dtype, dtype);
    EXPECT_EQ(rr.base, r.base);
    EXPECT_EQ(*rr.model, v);
  }
}

TEST(CodecWireDtypeTest, WelcomeAndJoinCarryTheDtypes) {
  welcome_msg w{3, 4, 5, 6, 6, training_mode::restarted_sgd, 10, std::chrono::seconds{1}};
  w.spec.wire = algorithms::wire_dtype::int8;
  auto wb = decode_to_worker(encode(to_worker{w}));
  ASSERT_TRUE(wb) << wb.error().message();
  EXPECT_EQ(std::get<welcome_msg>(*wb).spec.wire, algorithms::wire_dtype::int8);

  join_msg j{0, 5, 0, 0, 1.0, "m", "d"};
  j.wire_dtypes = {algorithms::wire_dtype::f32, algorithms::wire_dtype::bf16};
  auto jb = decode_to_averager(encode(to_averager{j}));
  ASSERT_TRUE(jb) << jb.error().message();
  EXPECT_EQ(std::get<join_msg>(*jb).wire_dtypes, j.wire_dtypes);
}

TEST(CodecWireDtypeTest, PayloadSizeMustMatchTheDtypeAndUnknownDtypesAreRefused) {
  model_msg m;
  m.steps = 1;
  m.samples = 1;
  m.dtype = algorithms::wire_dtype::bf16;
  m.params = std::make_shared<const std::vector<float>>(quantized(algorithms::wire_dtype::bf16));
  auto frames = encode(to_averager{m});
  frames[1] = frame::copy(frames[1].data(), frames[1].size() - 2);  // one bf16 value short
  auto bad = decode_to_averager(frames);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, errc::protocol_error);

  // A header naming a dtype this build does not know.
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(14);
  for (const auto& [k, v] : std::vector<std::pair<std::string, std::uint64_t>>{{"v", protocol_version},
                                                                               {"t", 5},
                                                                               {"m", 1},
                                                                               {"i", 1},
                                                                               {"a", 1},
                                                                               {"r", 0},
                                                                               {"k", 0},
                                                                               {"st", 1},
                                                                               {"sa", 1},
                                                                               {"lc", 0},
                                                                               {"n", 2}}) {
    pk.pack(k);
    pk.pack(v);
  }
  pk.pack(std::string{"ls"});
  pk.pack(0.0);
  pk.pack(std::string{"g"});
  pk.pack_false();
  pk.pack(std::string{"wd"});
  pk.pack(std::string{"fp8"});
  const multipart msg{frame::copy(buf.data(), buf.size()), frame::copy(std::string(2, '\0'))};
  auto unknown = decode_to_averager(msg);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, errc::decode_failed);
  EXPECT_NE(unknown.error().message().find("fp8"), std::string::npos) << unknown.error().message();
}

}  // namespace
}  // namespace prsgd::actors
