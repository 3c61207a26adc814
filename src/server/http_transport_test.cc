// The transport against real sockets on 127.0.0.1 (and a Unix socket, and TLS with a certificate
// made by the openssl CLI): framing limits, timeouts, connection caps, pipelining, streaming,
// client disconnects, the shutdown deadline; and the HTTP front's CORS, root path and API keys.
#include "server/http_transport.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include "server/http_server.h"

namespace mls::server {
namespace {

namespace asio = boost::asio;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using local = asio::local::stream_protocol;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// A reply body the test feeds by hand; counts aborts.
class TestSource : public ReplySource {
 public:
  void set_notify(std::function<void()> notify) override {
    std::lock_guard lock(mu_);
    notify_ = std::move(notify);
  }
  bool pull(std::string& out) override {
    std::lock_guard lock(mu_);
    out += pending_;
    pending_.clear();
    return finished_;
  }
  std::string abort(const std::string& reason) override {
    ++aborts;
    return "data: {\"error\": \"" + reason + "\"}\n\n";
  }
  void push(const std::string& s, bool last) {
    std::function<void()> notify;
    {
      std::lock_guard lock(mu_);
      pending_ += s;
      finished_ = last;
      notify = notify_;
    }
    if (notify) notify();
  }
  std::atomic<int> aborts{0};

 private:
  std::mutex mu_;
  std::string pending_;
  bool finished_ = false;
  std::function<void()> notify_;
};

// Routes of the test transport: /echo (body back), /slow (300 ms on the worker pool),
// /stream and /wait (a TestSource, streamed or not).
struct TestApp {
  std::shared_ptr<TestSource> source = std::make_shared<TestSource>();
  std::atomic<int> requests{0};

  Dispatch operator()(HttpRequest req) {
    ++requests;
    Dispatch d;
    if (req.target == "/echo") {
      d.reply.body = req.body;
      d.reply.content_type = "text/plain";
    } else if (req.target == "/slow") {
      d.work = [] {
        std::this_thread::sleep_for(300ms);
        Reply r;
        r.body = "slow";
        return r;
      };
    } else if (req.target == "/stream" || req.target == "/wait") {
      d.reply.source = source;
      d.reply.streaming = req.target == "/stream";
      d.reply.content_type = d.reply.streaming ? "text/event-stream" : "application/json";
    } else {
      d.reply = error_reply(404, "no route");
    }
    return d;
  }
};

HttpLimits test_limits() {
  HttpLimits l;
  l.max_header_bytes = 4096;
  l.max_header_count = 20;
  l.max_uri_bytes = 512;
  l.max_body_bytes = 1000;
  l.header_timeout = 1s;
  l.body_timeout = 1s;
  l.keep_alive_timeout = 1s;
  l.max_connections = 8;
  l.max_connections_per_peer = 4;
  return l;
}

class Fixture : public ::testing::Test {
 protected:
  void start(HttpLimits limits = test_limits(), std::string uds = {}, std::string cert = {},
             std::string key = {}) {
    transport_ =
        std::make_unique<HttpTransport>(TransportOptions{.host = "127.0.0.1",
                                                         .port = 0,
                                                         .uds = std::move(uds),
                                                         .ssl_certfile = std::move(cert),
                                                         .ssl_keyfile = std::move(key),
                                                         .limits = limits,
                                                         .io_threads = 2,
                                                         .worker_threads = 2},
                                        [this](HttpRequest r) { return app_(std::move(r)); });
    port_ = transport_->start();
  }
  void TearDown() override {
    if (transport_) transport_->stop(0ms);
  }

  tcp::socket connect() {
    tcp::socket s(io_);
    s.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port_)});
    return s;
  }

  asio::io_context io_;
  TestApp app_;
  std::unique_ptr<HttpTransport> transport_;
  int port_ = 0;
};

template <class S>
void send(S& s, const std::string& data) {
  asio::write(s, asio::buffer(data));
}

// Reads until the peer closes (or `timeout`), returning everything received.
template <class S>
std::string read_all(S& s) {
  std::string out;
  char buf[4096];
  boost::system::error_code ec;
  for (;;) {
    const size_t n = s.read_some(asio::buffer(buf), ec);
    if (ec) break;
    out.append(buf, n);
  }
  return out;
}

// Reads until `needle` has arrived (or the peer closes).
template <class S>
std::string read_until(S& s, std::string& pending, const std::string& needle) {
  char buf[4096];
  boost::system::error_code ec;
  while (pending.find(needle) == std::string::npos) {
    const size_t n = s.read_some(asio::buffer(buf), ec);
    if (ec) break;
    pending.append(buf, n);
  }
  const size_t end = pending.find(needle);
  if (end == std::string::npos) return std::exchange(pending, {});
  std::string head = pending.substr(0, end + needle.size());
  pending.erase(0, end + needle.size());
  return head;
}

int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0) return 0;
  return std::stoi(response.substr(9, 3));
}

std::string get(const std::string& target, const std::string& extra = "") {
  return "GET " + target + " HTTP/1.1\r\nHost: t\r\n" + extra + "\r\n";
}

std::string post(const std::string& target, const std::string& body,
                 const std::string& extra = "") {
  return "POST " + target +
         " HTTP/1.1\r\nHost: t\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + extra +
         "\r\n" + body;
}

template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 3000ms) {
  const auto deadline = Clock::now() + limit;
  while (!pred()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

TEST_F(Fixture, KeepAliveAndPipelinedRequestsAreAnsweredInOrder) {
  start();
  tcp::socket s = connect();
  send(s, post("/echo", "first") + post("/echo", "second") + get("/slow") + post("/echo", "3"));
  std::string pending;
  std::string all;
  for (int i = 0; i < 4; ++i) {
    const std::string head = read_until(s, pending, "\r\n\r\n");
    ASSERT_EQ(status_of(head), 200) << head;
    const size_t cl = head.find("Content-Length: ");
    ASSERT_NE(cl, std::string::npos);
    const size_t len = std::stoul(head.substr(cl + 16));
    while (pending.size() < len) {
      char buf[256];
      pending.append(buf, s.read_some(asio::buffer(buf)));
    }
    all += pending.substr(0, len) + "|";
    pending.erase(0, len);
  }
  EXPECT_EQ(all, "first|second|slow|3|");
}

TEST_F(Fixture, FramingAndSizeLimitsAnswerWithTheirStatus) {
  start();
  const auto answer = [&](const std::string& request) {
    tcp::socket s = connect();
    send(s, request);
    return read_all(s);
  };
  const std::string many_headers = [] {
    std::string h;
    for (int i = 0; i < 30; ++i) h += "X-H" + std::to_string(i) + ": v\r\n";
    return h;
  }();
  EXPECT_EQ(status_of(answer(get("/echo", many_headers))), 431);
  EXPECT_EQ(status_of(answer(get("/echo", "X-Big: " + std::string(5000, 'a') + "\r\n"))), 431);
  EXPECT_EQ(status_of(answer(get("/echo?" + std::string(600, 'q')))), 414);
  EXPECT_EQ(status_of(answer(post("/echo", std::string(1001, 'b')))), 413);
  const std::string chunked_over =
      "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
      "200\r\n" +
      std::string(512, 'c') + "\r\n200\r\n" + std::string(512, 'c') + "\r\n0\r\n\r\n";
  EXPECT_EQ(status_of(answer(chunked_over)), 413);
  const std::string chunked_ok =
      "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
  const std::string ok = answer(chunked_ok);
  EXPECT_EQ(status_of(ok), 200);
  EXPECT_NE(ok.find("\r\n\r\nabcde"), std::string::npos);
  EXPECT_EQ(status_of(answer(post("/echo", "x", "Content-Encoding: gzip\r\n"))), 415);
  EXPECT_EQ(status_of(answer(post("/echo", "x", "Content-Encoding: identity\r\n"))), 200);
  EXPECT_EQ(status_of(answer("POST /echo HTTP/1.1\r\nHost: t\r\n\r\n")), 411);
  EXPECT_EQ(status_of(answer("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, "
                             "chunked\r\n\r\n")),
            501);
  EXPECT_EQ(status_of(answer("GARBAGE\r\n\r\n")), 400);
  const std::string refused = answer(post("/echo", std::string(1001, 'b')));
  EXPECT_NE(refused.find("\"type\":\"RequestEntityTooLargeError\""), std::string::npos) << refused;
  EXPECT_NE(refused.find("Connection: close"), std::string::npos);
}

TEST_F(Fixture, ExpectContinueGetsAnInterimAnswer) {
  start();
  tcp::socket s = connect();
  send(s, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n");
  std::string pending;
  EXPECT_EQ(read_until(s, pending, "\r\n\r\n"), "HTTP/1.1 100 Continue\r\n\r\n");
  send(s, "body");
  EXPECT_EQ(status_of(read_until(s, pending, "body")), 200);
}

TEST_F(Fixture, SlowHeadersAreCutOffWhileOthersAreServed) {
  start();
  std::vector<tcp::socket> slow;
  for (int i = 0; i < 3; ++i) {
    slow.push_back(connect());
    send(slow.back(), "GET /echo HTTP/1.1\r\n");
  }
  const auto t0 = Clock::now();
  // One byte every 200 ms keeps each connection busy but never finishes its headers.
  std::thread trickle([&] {
    for (int i = 0; i < 10; ++i) {
      for (auto& s : slow) {
        boost::system::error_code ec;
        asio::write(s, asio::buffer("X", 1), ec);
      }
      std::this_thread::sleep_for(200ms);
    }
  });
  tcp::socket ok = connect();
  send(ok, post("/echo", "alive"));
  std::string pending;
  EXPECT_EQ(status_of(read_until(ok, pending, "alive")), 200);
  EXPECT_LT(Clock::now() - t0, 500ms);
  for (auto& s : slow) read_all(s);  // returns once the server closes it
  const auto cut = Clock::now() - t0;
  trickle.join();
  EXPECT_GE(cut, 900ms);
  EXPECT_LT(cut, 1800ms);
}

TEST_F(Fixture, IdleKeptAliveConnectionsAreClosed) {
  start();
  tcp::socket s = connect();
  send(s, post("/echo", "hi"));
  const auto t0 = Clock::now();
  const std::string got = read_all(s);
  EXPECT_EQ(status_of(got), 200);
  EXPECT_GE(Clock::now() - t0, 900ms);
  EXPECT_LT(Clock::now() - t0, 1800ms);
}

TEST_F(Fixture, ConnectionsOverTheCapGet503) {
  start();
  std::vector<tcp::socket> held;
  for (int i = 0; i < 4; ++i) held.push_back(connect());
  ASSERT_TRUE(eventually([&] { return transport_->open_connections() == 4; }));
  tcp::socket extra = connect();
  const std::string refused = read_all(extra);
  EXPECT_EQ(status_of(refused), 503);
  EXPECT_NE(refused.find("ServiceUnavailableError"), std::string::npos);
  // Closing one frees its place.
  held.pop_back();
  ASSERT_TRUE(eventually([&] { return transport_->open_connections() == 3; }));
  tcp::socket again = connect();
  send(again, post("/echo", "in"));
  std::string pending;
  EXPECT_EQ(status_of(read_until(again, pending, "in")), 200);
}

TEST_F(Fixture, StreamsAreWrittenAsProducedAndEndWithTheLastChunk) {
  start();
  tcp::socket s = connect();
  send(s, get("/stream"));
  std::string pending;
  const std::string head = read_until(s, pending, "\r\n\r\n");
  EXPECT_EQ(status_of(head), 200);
  EXPECT_NE(head.find("Transfer-Encoding: chunked"), std::string::npos);
  app_.source->push("data: one\n\n", false);
  EXPECT_NE(read_until(s, pending, "one\n\n\r\n").find("data: one"), std::string::npos);
  app_.source->push("data: two\n\n", true);
  EXPECT_NE(read_until(s, pending, "0\r\n\r\n").find("data: two"), std::string::npos);
  EXPECT_EQ(app_.source->aborts, 0);
}

TEST_F(Fixture, ADisconnectAbortsAStream) {
  start();
  {
    tcp::socket s = connect();
    send(s, get("/stream"));
    std::string pending;
    read_until(s, pending, "\r\n\r\n");
  }
  EXPECT_TRUE(eventually([&] { return app_.source->aborts == 1; }));
}

TEST_F(Fixture, ADisconnectAbortsAWaitingRequest) {
  start();
  {
    tcp::socket s = connect();
    send(s, get("/wait"));
    ASSERT_TRUE(eventually([&] { return app_.requests == 1; }));
  }
  EXPECT_TRUE(eventually([&] { return app_.source->aborts == 1; }));
}

TEST_F(Fixture, BlockingWorkLeavesTheIoThreadsFree) {
  start();
  std::vector<tcp::socket> slow;
  for (int i = 0; i < 3; ++i) {
    slow.push_back(connect());
    send(slow.back(), get("/slow"));
  }
  const auto t0 = Clock::now();
  tcp::socket s = connect();
  send(s, post("/echo", "quick"));
  std::string pending;
  EXPECT_EQ(status_of(read_until(s, pending, "quick")), 200);
  EXPECT_LT(Clock::now() - t0, 200ms);
}

TEST_F(Fixture, StopLetsRequestsFinishThenCutsTheRest) {
  start();
  tcp::socket streaming = connect();
  send(streaming, get("/stream"));
  tcp::socket waiting = connect();
  send(waiting, get("/wait"));
  tcp::socket idle = connect();
  ASSERT_TRUE(eventually([&] { return app_.requests == 2; }));
  const auto t0 = Clock::now();
  std::thread stopper([&] { transport_->stop(500ms); });
  EXPECT_EQ(read_all(idle), "");  // idle connections close at once
  EXPECT_LT(Clock::now() - t0, 400ms);
  const std::string stream = read_all(streaming);
  EXPECT_NE(stream.find("the server is shutting down"), std::string::npos) << stream;
  EXPECT_NE(stream.find("\r\n0\r\n\r\n"), std::string::npos);
  EXPECT_GE(Clock::now() - t0, 450ms);
  const std::string wait = read_all(waiting);
  EXPECT_EQ(status_of(wait), 500);
  stopper.join();
  EXPECT_LT(Clock::now() - t0, 2s);
  EXPECT_EQ(transport_->open_connections(), 0u);
  // stop() refuses new connections.
  tcp::socket late(io_);
  boost::system::error_code ec;
  late.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port_)}, ec);
  EXPECT_TRUE(ec);
}

TEST_F(Fixture, UnixSocket) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("mls-test-" + std::to_string(getpid()) + ".sock"))
          .string();
  start(test_limits(), path);
  EXPECT_EQ(port_, 0);
  local::socket s(io_);
  s.connect(local::endpoint(path));
  send(s, post("/echo", "over unix"));
  std::string pending;
  EXPECT_EQ(status_of(read_until(s, pending, "over unix")), 200);
  transport_->stop(0ms);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST_F(Fixture, TlsWithASelfSignedCertificate) {
  const auto dir = std::filesystem::temp_directory_path() / ("mls-tls-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string cert = (dir / "cert.pem").string();
  const std::string key = (dir / "key.pem").string();
  const std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
      "-keyout " +
      key + " -out " + cert + " 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "the openssl CLI is needed (scripts/setup)";
  start(test_limits(), {}, cert, key);

  ssl::context client(ssl::context::tls_client);
  client.load_verify_file(cert);
  ssl::stream<tcp::socket> s(connect(), client);
  s.set_verify_mode(ssl::verify_peer);
  s.handshake(ssl::stream_base::client);
  send(s, post("/echo", "secret"));
  std::string pending;
  const std::string got = read_until(s, pending, "secret");
  EXPECT_EQ(status_of(got), 200);

  // Plain HTTP to the TLS port gets no answer but a closed connection.
  tcp::socket plain = connect();
  send(plain, post("/echo", "x"));
  EXPECT_EQ(status_of(read_all(plain)), 0);
  std::filesystem::remove_all(dir);
}

// The HTTP front without a model: CORS, root path and keys act before readiness.
class Front : public ::testing::Test {
 protected:
  void start(HttpOptions o) {
    o.transport.host = "127.0.0.1";
    o.transport.port = 0;
    server_ = std::make_unique<HttpServer>(std::move(o));
    port_ = server_->start();
  }
  std::string ask(const std::string& request) {
    tcp::socket s(io_);
    s.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port_)});
    send(s, request);
    std::string pending;
    std::string head = read_until(s, pending, "\r\n\r\n");
    const size_t cl = head.find("Content-Length: ");
    const size_t len = cl == std::string::npos ? 0 : std::stoul(head.substr(cl + 16));
    while (pending.size() < len) {
      char buf[256];
      pending.append(buf, s.read_some(asio::buffer(buf)));
    }
    return head + pending;
  }
  void TearDown() override { server_->stop(0ms); }

  asio::io_context io_;
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
};

TEST_F(Front, CorsPreflightSkipsTheKeyAndResponsesCarryTheOrigin) {
  HttpOptions o;
  o.api_keys = {"k1"};
  o.cors.allowed_origins = {"https://ok.example"};
  start(o);
  const std::string pre =
      ask("OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: t\r\nOrigin: https://ok.example\r\n"
          "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: "
          "authorization\r\n\r\n");
  EXPECT_EQ(status_of(pre), 200) << pre;
  EXPECT_NE(pre.find("Access-Control-Allow-Origin: https://ok.example"), std::string::npos);
  EXPECT_NE(pre.find("Access-Control-Allow-Headers: authorization"), std::string::npos);
  const std::string bad =
      ask("OPTIONS /v1/models HTTP/1.1\r\nHost: t\r\nOrigin: https://evil.example\r\n"
          "Access-Control-Request-Method: GET\r\n\r\n");
  EXPECT_EQ(status_of(bad), 400);
  const std::string simple = ask(get("/version", "Origin: https://ok.example\r\n"));
  EXPECT_EQ(status_of(simple), 200);
  EXPECT_NE(simple.find("Access-Control-Allow-Origin: https://ok.example"), std::string::npos);
}

TEST_F(Front, ApiKeysGuardV1AndTheTokenizerRoutes) {
  HttpOptions o;
  o.api_keys = {"first-key", "second-key"};
  start(o);
  EXPECT_EQ(status_of(ask(get("/v1/models"))), 401);
  EXPECT_EQ(status_of(ask(get("/v1/models", "Authorization: Bearer wrong\r\n"))), 401);
  EXPECT_EQ(status_of(ask(post("/tokenize", "{}"))), 401);
  EXPECT_EQ(status_of(ask(post("/detokenize", "{}"))), 401);
  // Either key passes; the model is not loaded in this test, hence 503.
  EXPECT_EQ(status_of(ask(get("/v1/models", "Authorization: Bearer second-key\r\n"))), 503);
  EXPECT_EQ(status_of(ask(post("/tokenize", "{}", "Authorization: bearer first-key\r\n"))), 503);
  EXPECT_EQ(status_of(ask(get("/version"))), 200);
  EXPECT_EQ(status_of(ask(get("/health"))), 503);
  EXPECT_EQ(status_of(ask(get("/ping"))), 503);
  EXPECT_EQ(status_of(ask(post("/ping", ""))), 503);
  EXPECT_EQ(status_of(ask(get("/nowhere"))), 404);
  EXPECT_EQ(status_of(ask(post("/version", ""))), 405);
}

TEST_F(Front, RootPathIsStrippedWhenPresent) {
  HttpOptions o;
  o.root_path = "/llm";
  start(o);
  EXPECT_EQ(status_of(ask(get("/llm/version"))), 200);
  EXPECT_EQ(status_of(ask(get("/version"))), 200);
  EXPECT_EQ(status_of(ask(get("/llmx/version"))), 404);
  EXPECT_EQ(server_->url(port_), "http://127.0.0.1:" + std::to_string(port_) + "/llm");
}

}  // namespace
}  // namespace mls::server
