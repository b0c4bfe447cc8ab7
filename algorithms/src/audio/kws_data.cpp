// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/kws_data.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <unordered_map>
#include <vector>

#include <zlib.h>

#include "../data/dataset_files.hpp"
#include "prsgd/algorithms/wav.hpp"
#include "prsgd/common/log.hpp"

namespace prsgd::algorithms {
namespace fs = std::filesystem;

namespace {

constexpr std::array<std::string_view, kws_num_classes> words = {"yes", "no",  "up",   "down", "left", "right",
                                                                 "on",  "off", "stop", "go",   "zero", "one"};
constexpr char cache_magic[8] = {'P', 'R', 'S', 'G', 'D', 'K', 'W', 'S'};
constexpr std::uint32_t cache_version = 1;
constexpr std::size_t cache_header_bytes = 8 + 4 * 4 + 8 * 4;

enum class split_source : std::uint8_t { manifest, testing_list, speaker_hash };

struct entry {
  std::string rel;  // "<word>/<file>.wav", '/'-separated
  fs::path full;
  int label = 0;
  bool test = false;
};

std::string speaker_of(std::string_view file_name) {
  const auto pos = file_name.find("_nohash_");
  if (pos != std::string_view::npos) {
    return std::string{file_name.substr(0, pos)};
  }
  const auto dot = file_name.rfind('.');
  return std::string{file_name.substr(0, dot)};
}

bool speaker_in_test(std::string_view speaker, int test_percent) {
  fnv1a h;
  h.add(speaker);
  return static_cast<int>(h.value() % 100) < test_percent;
}

/// Reads manifest.csv's path -> is-test map.
expected<std::unordered_map<std::string, bool>> read_manifest(const fs::path& file) {
  std::ifstream in(file);
  if (!in) {
    return fail(errc::io_error, file.string() + ": cannot open");
  }
  std::string line;
  if (!std::getline(in, line)) {
    return fail(errc::decode_failed, file.string() + ": empty manifest");
  }
  const auto header = split_csv_line(line);
  const auto path_col = std::find(header.begin(), header.end(), "path") - header.begin();
  const auto split_col = std::find(header.begin(), header.end(), "split") - header.begin();
  if (path_col == static_cast<std::ptrdiff_t>(header.size()) ||
      split_col == static_cast<std::ptrdiff_t>(header.size())) {
    return fail(errc::decode_failed, file.string() + ": header lacks a 'path' or 'split' column");
  }
  std::unordered_map<std::string, bool> out;
  for (int number = 2; std::getline(in, line); ++number) {
    if (line.empty() || line == "\r") {
      continue;
    }
    const auto cells = split_csv_line(line);
    const auto need = static_cast<std::size_t>(std::max(path_col, split_col));
    if (cells.size() <= need) {
      return fail(errc::decode_failed, file.string() + ":" + std::to_string(number) + ": too few columns");
    }
    const std::string& split = cells[static_cast<std::size_t>(split_col)];
    if (split != "train" && split != "test") {
      return fail(errc::decode_failed,
                  file.string() + ":" + std::to_string(number) + ": split '" + split + "' is neither train nor test");
    }
    out[cells[static_cast<std::size_t>(path_col)]] = split == "test";
  }
  return out;
}

std::set<std::string> read_list(const fs::path& file) {
  std::set<std::string> out;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) {
      line.pop_back();
    }
    if (!line.empty()) {
      out.insert(line);
    }
  }
  return out;
}

std::int64_t mtime_of(const fs::path& p) {
  std::error_code ec;
  const auto t = fs::last_write_time(p, ec);
  return ec ? 0 : static_cast<std::int64_t>(t.time_since_epoch().count());
}

void put(std::vector<std::uint8_t>& out, const void* data, std::size_t n) {
  if (n == 0) {
    return;
  }
  const std::size_t at = out.size();
  out.resize(at + n);
  std::memcpy(out.data() + at, data, n);
}

template <class T>
T get(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::uint32_t crc_of(const std::uint8_t* data, std::size_t n) { return crc32_update(0, data, n); }

dataset empty_split(const clip_set_options& o, int frames, const char* which) {
  dataset d;
  d.shape = {1, frames, o.features.num_mels};
  d.num_classes = o.num_classes;
  d.name = o.root.string() + ":" + which;
  return d;
}

/// Returns the cached splits if the cache exists, matches `fingerprint` and passes its CRC; else nullopt.
std::optional<kws_data> read_cache(const clip_set_options& o, std::uint64_t fingerprint, int frames) {
  std::ifstream in(o.cache_file, std::ios::binary);
  if (!in) {
    return std::nullopt;
  }
  const std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string name = o.cache_file.string();
  if (bytes.size() < cache_header_bytes || std::memcmp(bytes.data(), cache_magic, 8) != 0 ||
      get<std::uint32_t>(bytes.data() + 8) != cache_version) {
    PRSGD_LOG(warn, "audio") << name << ": not a feature cache of this version; recomputing";
    return std::nullopt;
  }
  const auto cached_frames = get<std::uint32_t>(bytes.data() + 12);
  const auto mels = get<std::uint32_t>(bytes.data() + 16);
  const auto crc = get<std::uint32_t>(bytes.data() + 20);
  const auto cached_fingerprint = get<std::uint64_t>(bytes.data() + 24);
  const auto n_train = get<std::uint64_t>(bytes.data() + 32);
  const auto n_test = get<std::uint64_t>(bytes.data() + 40);
  const auto payload = get<std::uint64_t>(bytes.data() + 48);
  if (cached_fingerprint != fingerprint || cached_frames != static_cast<std::uint32_t>(frames) ||
      mels != static_cast<std::uint32_t>(o.features.num_mels)) {
    PRSGD_LOG(info, "audio") << name << ": sources or options changed; recomputing features";
    return std::nullopt;
  }
  const std::uint64_t sample_floats = static_cast<std::uint64_t>(frames) * mels;
  const std::uint64_t expect = (n_train + n_test) * (sizeof(std::int32_t) + sample_floats * sizeof(float));
  if (payload != expect || bytes.size() - cache_header_bytes != payload ||
      crc_of(bytes.data() + cache_header_bytes, payload) != crc) {
    PRSGD_LOG(warn, "audio") << name << ": size or CRC-32 mismatch (corrupt cache); recomputing";
    return std::nullopt;
  }
  kws_data out{empty_split(o, frames, "train"), empty_split(o, frames, "test"), true};
  const std::uint8_t* p = bytes.data() + cache_header_bytes;
  for (dataset* d : {&out.train, &out.test}) {
    const std::uint64_t n = d == &out.train ? n_train : n_test;
    if (n == 0) {
      continue;  // memcpy into an empty vector's null data() would be undefined
    }
    d->labels.resize(n);
    std::memcpy(d->labels.data(), p, n * sizeof(std::int32_t));
    p += n * sizeof(std::int32_t);
    d->features.resize(n * sample_floats);
    std::memcpy(d->features.data(), p, d->features.size() * sizeof(float));
    p += d->features.size() * sizeof(float);
    for (const std::int32_t label : d->labels) {
      if (label < 0 || label >= o.num_classes) {
        PRSGD_LOG(warn, "audio") << name << ": label out of range; recomputing";
        return std::nullopt;
      }
    }
  }
  return out;
}

void write_cache(const clip_set_options& o, std::uint64_t fingerprint, int frames, const kws_data& data) {
  std::vector<std::uint8_t> payload;
  payload.reserve((data.train.size() + data.test.size()) * (4 + data.train.sample_size() * 4));
  for (const dataset* d : {&data.train, &data.test}) {
    put(payload, d->labels.data(), d->labels.size() * sizeof(std::int32_t));
    put(payload, d->features.data(), d->features.size() * sizeof(float));
  }
  std::vector<std::uint8_t> header;
  put(header, cache_magic, 8);
  const std::uint32_t u32s[] = {cache_version, static_cast<std::uint32_t>(frames),
                                static_cast<std::uint32_t>(o.features.num_mels),
                                crc_of(payload.data(), payload.size())};
  put(header, u32s, sizeof u32s);
  const std::uint64_t u64s[] = {fingerprint, data.train.size(), data.test.size(), payload.size()};
  put(header, u64s, sizeof u64s);
  // Write beside the target and rename, so a crash never leaves a half-written cache behind.
  fs::path tmp = o.cache_file;
  tmp += ".tmp." + std::to_string(::getpid());  // processes sharing a cache never write one temp file
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(header.data()), static_cast<std::streamsize>(header.size()));
    out.write(reinterpret_cast<const char*>(payload.data()), static_cast<std::streamsize>(payload.size()));
    out.close();
    if (!out) {
      PRSGD_LOG(warn, "audio") << tmp.string() << ": cannot write feature cache";
      std::error_code ec;
      fs::remove(tmp, ec);
      return;
    }
  }
  std::error_code ec;
  fs::rename(tmp, o.cache_file, ec);
  if (ec) {
    PRSGD_LOG(warn, "audio") << o.cache_file.string() << ": cannot install feature cache: " << ec.message();
    fs::remove(tmp, ec);
  }
}

}  // namespace

const std::array<std::string_view, kws_num_classes>& kws_words() noexcept { return words; }

int kws_label(std::string_view word) noexcept {
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (words[i] == word) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

expected<kws_data> featurise_clips(const std::vector<labelled_clip>& clips, const clip_set_options& o) {
  if (o.clip_samples <= 0 || o.num_classes <= 0) {
    return fail(errc::invalid_argument, "featurise_clips: clip_samples and num_classes must be > 0");
  }
  auto mel = log_mel::make(o.features);
  PRSGD_TRY(mel);
  const int frames = mel->num_frames(static_cast<std::size_t>(o.clip_samples));
  if (frames == 0) {
    return fail(errc::invalid_argument, "featurise_clips: clip_samples is shorter than one analysis window");
  }

  // Fingerprint everything the features depend on, and try the cache.
  fnv1a fp;
  fp.add("prsgd-kws-features-v2");
  const log_mel_options& f = o.features;
  for (const int v :
       {f.sample_rate, f.window_length, f.hop_length, f.fft_size, f.num_mels, o.clip_samples, o.num_classes}) {
    fp.add_value(v);
  }
  for (const double v : {f.min_hz, f.max_hz, f.eps}) {
    fp.add_value(std::bit_cast<std::uint64_t>(v));
  }
  fp.add(o.split_key);
  std::error_code ec;
  for (const labelled_clip& c : clips) {
    if (c.label < 0 || c.label >= o.num_classes) {
      return fail(errc::invalid_argument, c.file.string() + ": label " + std::to_string(c.label) + " out of range");
    }
    fp.add(c.rel);
    fp.add_value(static_cast<std::uint64_t>(fs::file_size(c.file, ec)));
    fp.add_value(mtime_of(c.file));
    fp.add_value(c.label);
    fp.add_value(static_cast<std::uint8_t>(c.test));
  }
  std::optional<cache_lock> lock;
  if (!o.cache_file.empty()) {
    lock.emplace(o.cache_file);
    if (auto cached = read_cache(o, fp.value(), frames)) {
      PRSGD_LOG(info, "audio") << o.root.string() << ": " << cached->train.size() << " train + " << cached->test.size()
                               << " test clips from cache " << o.cache_file.string();
      return std::move(*cached);
    }
  }

  // Decode and featurise.
  kws_data out{empty_split(o, frames, "train"), empty_split(o, frames, "test"), false};
  const std::size_t sample_floats = out.train.sample_size();
  const wav_format required{f.sample_rate, 1, 16};
  std::vector<float> clip(static_cast<std::size_t>(o.clip_samples));
  for (const labelled_clip& c : clips) {
    auto audio = read_wav(c.file, required);
    PRSGD_TRY(audio);
    std::fill(clip.begin(), clip.end(), 0.0f);
    std::copy_n(audio->begin(), std::min(audio->size(), clip.size()), clip.begin());
    const feature_matrix m = mel->compute(clip);
    dataset& d = c.test ? out.test : out.train;
    d.features.insert(d.features.end(), m.data(), m.data() + sample_floats);
    d.labels.push_back(c.label);
  }
  PRSGD_LOG(info, "audio") << o.root.string() << ": featurised " << out.train.size() << " train + " << out.test.size()
                           << " test clips";
  if (!o.cache_file.empty()) {
    write_cache(o, fp.value(), frames, out);
  }
  return out;
}

expected<kws_data> load_kws(const kws_options& o) {
  if (o.clip_samples <= 0 || o.test_percent < 0 || o.test_percent > 100) {
    return fail(errc::invalid_argument, "load_kws: clip_samples must be > 0 and test_percent in 0..100");
  }
  std::error_code ec;
  if (!fs::is_directory(o.root, ec)) {
    return fail(errc::not_found, o.root.string() + ": no such data-set directory");
  }

  // 1. Scan <root>/<word>/*.wav for the 12 keywords, in a stable order.
  std::vector<entry> entries;
  for (const auto& word : words) {
    const fs::path dir = o.root / word;
    if (!fs::is_directory(dir, ec)) {
      continue;
    }
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const fs::path& p = it->path();
      if (p.extension() != ".wav" || !it->is_regular_file(ec)) {
        continue;
      }
      entry e;
      e.rel = std::string{word} + "/" + p.filename().string();
      e.full = p;
      e.label = kws_label(word);
      entries.push_back(std::move(e));
    }
    if (ec) {
      return fail(errc::io_error, dir.string() + ": cannot list: " + ec.message());
    }
  }
  if (entries.empty()) {
    return fail(errc::not_found, o.root.string() + ": no <word>/*.wav files for any of the 12 keywords");
  }
  std::sort(entries.begin(), entries.end(),
            [](const entry& a, const entry& b) { return a.label != b.label ? a.label < b.label : a.rel < b.rel; });
  // Interleave the words (yes, no, up, ..., one, yes, no, ...): the averager hands out training samples as
  // contiguous blocks, and in label order a block would hold one or two words, so a worker would train a
  // whole round on a single word.
  {
    std::vector<std::vector<entry>> by_label(kws_num_classes);
    for (entry& e : entries) {
      by_label[static_cast<std::size_t>(e.label)].push_back(std::move(e));
    }
    entries.clear();
    for (std::size_t k = 0, taken = 1; taken > 0; ++k) {
      taken = 0;
      for (auto& same : by_label) {
        if (k < same.size()) {
          entries.push_back(std::move(same[k]));
          ++taken;
        }
      }
    }
  }

  // 2. Decide each file's split.
  const fs::path manifest = o.root / "manifest.csv";
  const fs::path testing_list = o.root / "testing_list.txt";
  split_source source = split_source::speaker_hash;
  fs::path split_file;
  std::size_t unlisted = 0;
  if (fs::is_regular_file(manifest, ec)) {
    source = split_source::manifest;
    split_file = manifest;
    auto splits = read_manifest(manifest);
    PRSGD_TRY(splits);
    for (entry& e : entries) {
      const auto it = splits->find(e.rel);
      if (it != splits->end()) {
        e.test = it->second;
      } else {
        ++unlisted;
        e.test = speaker_in_test(speaker_of(fs::path(e.rel).filename().string()), o.test_percent);
      }
    }
  } else if (fs::is_regular_file(testing_list, ec)) {
    source = split_source::testing_list;
    split_file = testing_list;
    const std::set<std::string> test = read_list(testing_list);
    for (entry& e : entries) {
      e.test = test.count(e.rel) > 0;
    }
  } else {
    for (entry& e : entries) {
      e.test = speaker_in_test(speaker_of(e.full.filename().string()), o.test_percent);
    }
  }
  if (unlisted > 0) {
    PRSGD_LOG(warn, "kws") << manifest.string() << ": " << unlisted
                           << " WAV files are not listed; split by speaker hash instead";
  }

  // 3. Featurise (or read the cache).
  clip_set_options c;
  c.root = o.root;
  c.cache_file = o.cache_file;
  c.features = o.features;
  c.clip_samples = o.clip_samples;
  c.num_classes = kws_num_classes;
  c.split_key = "kws split " + std::to_string(static_cast<int>(source)) + " test% " + std::to_string(o.test_percent);
  if (!split_file.empty()) {
    c.split_key += " " + std::to_string(fs::file_size(split_file, ec)) + " " + std::to_string(mtime_of(split_file));
  }
  std::vector<labelled_clip> clips;
  clips.reserve(entries.size());
  for (entry& e : entries) {
    clips.push_back({std::move(e.rel), std::move(e.full), e.label, e.test});
  }
  return featurise_clips(clips, c);
}

}  // namespace prsgd::algorithms
