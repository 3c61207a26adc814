#include "server/request_driver.h"

#include <fmt/format.h>

#include <chrono>

#include "core/error.h"
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
  if (len >= mml || len + max_tokens > mml)
    bad_request(fmt::format("This model's maximum context length is {} tokens. However, you "
                            "requested {} tokens ({} in the {}, {} in the completion). Please "
                            "reduce the length of the {} or completion.",
                            mml, len + max_tokens, len, what, max_tokens, what),
                what);

  Request req;
  req.id = fmt::format("{}-{}", id_, engine_ids_.size());
  req.prompt_ids = std::move(prompt_ids);
  req.params = sampling.params;
  req.constraint = sampling.constraint;
  StreamSpec spec{.first_choice = num_choices_,
                  .n = sampling.params.n,
                  .skip_special_tokens = sampling.skip_special_tokens,
                  .stop = sampling.stop,
                  .script = ctx_.opts.test_script};
  if (spec.script) {
    // The script decides where the output ends; nothing sampled may end it earlier.
    req.params.ignore_eos = true;
    req.params.stop_token_ids.clear();
    req.params.logprobs = -1;
    req.constraint = nullptr;
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

bool RequestDriver::next(std::vector<OutputEvent>& out) {
  if (num_finished_ >= num_choices_) return false;
  const size_t before = out.size();
  if (!ctx_.loop.alive() && !channel_->wait(out, std::chrono::milliseconds(0)))
    throw ApiError(500, "the engine stopped: " + ctx_.loop.failure());
  channel_->wait(out, std::chrono::milliseconds(100));
  for (size_t i = before; i < out.size(); ++i)
    if (out[i].finish != FinishReason::kNone) ++num_finished_;
  return true;
}

void RequestDriver::abort() {
  for (const std::string& id : engine_ids_) ctx_.loop.abort(id);
  num_finished_ = num_choices_;
}

}  // namespace mls::server
