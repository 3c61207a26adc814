// Turns a running request into a Reply, for any responder that shapes events into an OpenAI
// response (chat or text completions): collect everything and answer once, or stream SSE
// chunks, an optional usage chunk and [DONE]. Errors after the headers are out travel as a data
// chunk with an `error` object, as OpenAI streams report them; a client gone aborts the request.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "server/errors.h"
#include "server/request_driver.h"
#include "server/serving_context.h"
#include "server/sse.h"

namespace mls::server {

template <class Responder>
Reply reply_from_driver(std::shared_ptr<RequestDriver> driver, std::shared_ptr<Responder> responder,
                        bool stream) {
  Reply reply;
  if (!stream) {
    std::vector<OutputEvent> events;
    while (driver->next(events)) {
      responder->absorb(events);
      events.clear();
    }
    nlohmann::json body = responder->response(driver->prompt_tokens());
    if (nlohmann::json t = driver->timings(); !t.is_null()) body["timings"] = std::move(t);
    reply.body = dump_json(body);
    return reply;
  }
  reply.content_type = "text/event-stream";
  reply.stream = [driver, responder](const std::function<bool(std::string_view)>& write) {
    std::vector<OutputEvent> events;
    try {
      while (driver->next(events)) {
        for (const nlohmann::json& chunk : responder->stream_chunks(events))
          if (!write(sse_event(chunk))) return driver->abort();
        events.clear();
      }
      if (auto usage = responder->usage_chunk(driver->prompt_tokens())) {
        if (nlohmann::json t = driver->timings(); !t.is_null()) (*usage)["timings"] = std::move(t);
        if (!write(sse_event(*usage))) return;
      }
    } catch (const std::exception& e) {
      driver->abort();
      if (!write(sse_event({{"error", error_body(500, e.what())["error"]}}))) return;
    }
    write(sse_done());
  };
  return reply;
}

}  // namespace mls::server
