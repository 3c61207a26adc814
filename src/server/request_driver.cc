#include "server/request_driver.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/logging.h"
#include "server/errors.h"

namespace mls::server {

RequestDriver::RequestDriver(ServingContext& ctx, std::string id) : ctx_(ctx), id_(std::move(id)) {}

RequestDriver::~RequestDriver() {
  if (num_finished_ < num_choices_) abort();
}

void RequestDriver::submit(std::vector<int32_t> prompt_ids, const SamplingOptions& sampling,
                           const char* what) {
  const auto len = static_cast<int64_t>(prompt_ids.size());
  const int64_t mml = ctx_.max_model_len();
  const int64_t max_tokens = sampling.params.max_tokens;
  if (len == 0) bad_request(fmt::format("the {} produced no tokens", what), what);
  // max_tokens is the client's (up to INT64_MAX): compared by subtraction, summed unsigned.
  if (len >= mml || max_tokens > mml - len)
    bad_request(fmt::format("This model's maximum context length is {} tokens. However, you "
                            "requested {} tokens ({} in the {}, {} in the completion). Please "
                            "reduce the length of the {} or completion.",
                            mml, static_cast<uint64_t>(len) + static_cast<uint64_t>(max_tokens),
                            len, what, max_tokens, what),
                what);

  Request req;
  req.id = fmt::format("{}-{}", id_, engine_ids_.size());
  req.prompt_ids = std::move(prompt_ids);
  req.params = sampling.params;
  if (!sampling.bad_words.empty())
    req.params.bad_words_token_ids =
        bad_words_token_ids(ctx_.text_tokenizer("bad_words"), sampling.bad_words);
  req.constraint = sampling.constraint;
  StreamSpec spec{.first_choice = num_choices_,
                  .n = sampling.params.n,
                  .max_tokens = sampling.params.max_tokens,
                  .skip_special_tokens = sampling.skip_special_tokens,
                  .stop = sampling.stop,
                  .include_stop_str_in_output = sampling.include_stop_str_in_output,
                  .stop_token_ids = sampling.params.stop_token_ids,
                  .script = ctx_.opts.test_script};
  if (spec.script) {
    // The script decides where the output ends; nothing sampled may end it earlier.
    req.params.ignore_eos = true;
    req.params.stop_token_ids.clear();
    req.params.logprobs = -1;
    req.constraint = nullptr;
  }
  if (ctx_.opts.log_requests) {
    std::string prompt = ctx_.tokenizer ? ctx_.tokenizer->decode(req.prompt_ids, false)
                                        : fmt::format("{}", fmt::join(req.prompt_ids, ","));
    if (ctx_.opts.max_log_len >= 0 && prompt.size() > static_cast<size_t>(ctx_.opts.max_log_len))
      prompt.resize(static_cast<size_t>(ctx_.opts.max_log_len));
    const SamplingParams& p = req.params;
    MLS_LOG_INFO(
        "Received request {}: prompt: {:?}, {} prompt tokens, params: n={}, max_tokens={}, "
        "temperature={}, top_p={}, top_k={}, min_p={}, seed={}",
        req.id, prompt, req.prompt_ids.size(), p.n, p.max_tokens, p.temperature, p.top_p, p.top_k,
        p.min_p, p.seed ? std::to_string(*p.seed) : "none");
  }
  req.on_token = OutputStream::callback(ctx_.tokenizer, std::move(spec), channel_, &ctx_.metrics);
  try {
    ctx_.loop.submit(req);
  } catch (const InvalidArgument& e) {
    bad_request(e.what());
  }
  engine_ids_.push_back(req.id);
  num_choices_ += sampling.params.n;
  prompt_tokens_ += len;
}

bool RequestDriver::poll(std::vector<OutputEvent>& out) {
  if (num_finished_ >= num_choices_) return false;
  const size_t before = out.size();
  if (!channel_->take(out) && !ctx_.loop.alive())
    throw ApiError(500, "the engine stopped: " + ctx_.loop.failure());
  for (size_t i = before; i < out.size(); ++i) {
    if (out[i].finish != FinishReason::kNone) ++num_finished_;
    if (out[i].token_ids.empty()) continue;
    // The engine-side time of the token: events reach this thread in batches.
    last_token_ = out[i].at;
    if (completion_tokens_ == 0) first_token_ = last_token_;
    completion_tokens_ += static_cast<int64_t>(out[i].token_ids.size());
  }
  return num_finished_ < num_choices_;
}

nlohmann::json RequestDriver::timings() const {
  if (!ctx_.opts.enable_timings) return nullptr;
  const auto ms = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  const double prompt_ms = completion_tokens_ > 0 ? ms(start_, first_token_) : 0.0;
  // Prompt time runs to the first token (queueing included); generation time from the first
  // token to the last, which covers completion tokens − 1 steps.
  const double predicted_ms = completion_tokens_ > 0 ? ms(first_token_, last_token_) : 0.0;
  const auto per = [](double t, int64_t n) { return n > 0 ? t / static_cast<double>(n) : 0.0; };
  const auto rate = [](double t, int64_t n) {
    return t > 0 ? 1e3 * static_cast<double>(n) / t : 0.0;
  };
  const int64_t predicted_n = std::max<int64_t>(completion_tokens_ - 1, 0);
  return {{"prompt_n", prompt_tokens_},
          {"prompt_ms", prompt_ms},
          {"prompt_per_token_ms", per(prompt_ms, prompt_tokens_)},
          {"prompt_per_second", rate(prompt_ms, prompt_tokens_)},
          {"predicted_n", completion_tokens_},
          {"predicted_ms", predicted_ms},
          {"predicted_per_token_ms", per(predicted_ms, predicted_n)},
          {"predicted_per_second", rate(predicted_ms, predicted_n)}};
}

void RequestDriver::abort() {
  for (const std::string& id : engine_ids_) ctx_.loop.abort(id);
  num_finished_ = num_choices_;
}

}  // namespace mls::server
