#include "server/logprobs_format.h"

#include <cmath>

namespace mls::server {

std::string token_string(const tok::Tokenizer& tok, int32_t id) {
  if (id < 0 || id >= tok.vocab_size()) return {};
  try {
    const int32_t ids[] = {id};
    return tok.decode(ids, false);
  } catch (const std::exception&) {
    return {};
  }
}

double finite_logprob(float lp) {
  return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0;
}

namespace {
nlohmann::json bytes_of(const std::string& s) {
  nlohmann::json out = nlohmann::json::array();
  for (unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}
}  // namespace

nlohmann::json chat_logprob_entries(const tok::Tokenizer& tok, const std::vector<Logprobs>& lps) {
  nlohmann::json out = nlohmann::json::array();
  for (const Logprobs& lp : lps) {
    const std::string s = token_string(tok, lp.sampled.token_id);
    nlohmann::json top = nlohmann::json::array();
    for (const TokenLogprob& t : lp.top) {
      const std::string ts = token_string(tok, t.token_id);
      top.push_back(
          {{"token", ts}, {"logprob", finite_logprob(t.logprob)}, {"bytes", bytes_of(ts)}});
    }
    out.push_back({{"token", s},
                   {"logprob", finite_logprob(lp.sampled.logprob)},
                   {"bytes", bytes_of(s)},
                   {"top_logprobs", std::move(top)}});
  }
  return out;
}

nlohmann::json prompt_logprob_entries(const tok::Tokenizer& tok,
                                      const std::vector<int32_t>& prompt_ids,
                                      const std::vector<Logprobs>& lps) {
  nlohmann::json out = nlohmann::json::array();
  if (prompt_ids.empty()) return out;
  out.push_back(nullptr);
  for (const Logprobs& lp : lps) {
    nlohmann::json entry = nlohmann::json::object();
    const auto add = [&](const TokenLogprob& t, int64_t rank) {
      entry[std::to_string(t.token_id)] = {{"logprob", finite_logprob(t.logprob)},
                                           {"rank", rank},
                                           {"decoded_token", token_string(tok, t.token_id)}};
    };
    for (size_t i = 0; i < lp.top.size(); ++i) add(lp.top[i], static_cast<int64_t>(i) + 1);
    add(lp.sampled, lp.rank);
    out.push_back(std::move(entry));
  }
  return out;
}

void append_completion_prompt_logprobs(const tok::Tokenizer& tok,
                                       const std::vector<int32_t>& prompt_ids,
                                       const std::vector<Logprobs>& lps, nlohmann::json& obj,
                                       int64_t& offset) {
  if (prompt_ids.empty()) return;
  nlohmann::json first = {{"tokens", nlohmann::json::array()},
                          {"token_logprobs", nlohmann::json::array({nullptr})},
                          {"top_logprobs", nlohmann::json::array({nullptr})},
                          {"text_offset", nlohmann::json::array({offset})}};
  const std::string s = token_string(tok, prompt_ids[0]);
  first["tokens"].push_back(s);
  offset += static_cast<int64_t>(s.size());
  if (!obj.is_object()) {
    obj = std::move(first);
  } else {
    for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
      obj[k].push_back(first[k][0]);
  }
  append_completion_logprobs(tok, lps, obj, offset);
}

void append_completion_logprobs(const tok::Tokenizer& tok, const std::vector<Logprobs>& lps,
                                nlohmann::json& obj, int64_t& offset) {
  if (!obj.is_object())
    obj = {{"tokens", nlohmann::json::array()},
           {"token_logprobs", nlohmann::json::array()},
           {"top_logprobs", nlohmann::json::array()},
           {"text_offset", nlohmann::json::array()}};
  for (const Logprobs& lp : lps) {
    const std::string s = token_string(tok, lp.sampled.token_id);
    obj["tokens"].push_back(s);
    obj["token_logprobs"].push_back(finite_logprob(lp.sampled.logprob));
    nlohmann::json top = nlohmann::json::object();
    for (const TokenLogprob& t : lp.top)
      top[token_string(tok, t.token_id)] = finite_logprob(t.logprob);
    obj["top_logprobs"].push_back(std::move(top));
    obj["text_offset"].push_back(offset);
    offset += static_cast<int64_t>(s.size());
  }
}

}  // namespace mls::server
