#include "server/http_transport.h"

#include <sys/resource.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/logging.h"
#include "server/errors.h"
#include "server/sse.h"
#include "server/tls_context.h"

namespace mls::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using local = asio::local::stream_protocol;
using error_code = boost::system::error_code;

// While a reply is being written the connection keeps reading, to notice a client that goes
// away; bytes that arrive meanwhile (a pipelined request) stay buffered and stop that watch.
constexpr size_t kWatchReadBytes = 4096;
// A stream or a non-streaming request checks its source at least this often even without an
// engine event, so a dead engine loop is reported rather than waited on.
constexpr auto kPollInterval = std::chrono::seconds(1);
// After an error response the connection stops sending and reads what the client still sends
// for this long before closing, so that the close does not reset the connection under the
// response.
constexpr auto kLingerTimeout = std::chrono::seconds(1);
// How long stop() lets cut-off requests write their final error before closing everything.
constexpr auto kCutWriteTimeout = std::chrono::seconds(2);

std::string reason_phrase(int status) {
  const beast::string_view r = http::obsolete_reason(static_cast<http::status>(status));
  return r.empty() ? "Unknown" : std::string(r);
}

std::string chunk(std::string_view data) {
  if (data.empty()) return {};
  return fmt::format("{:x}\r\n{}\r\n", data.size(), data);
}

bool iequals(std::string_view a, std::string_view b) {
  return beast::iequals(a, b);
}

// Every content coding but identity is refused: bodies are never inflated here.
bool identity_only(std::string_view coding) {
  size_t start = 0;
  while (start <= coding.size()) {
    const size_t comma = std::min(coding.find(',', start), coding.size());
    std::string_view item = coding.substr(start, comma - start);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (!item.empty() && !iequals(item, "identity")) return false;
    start = comma + 1;
  }
  return true;
}

class ConnectionBase {
 public:
  virtual ~ConnectionBase() = default;
  // Each posts to the connection's strand. drain: close once the request in flight (if any) is
  // answered; cut: abort the request in flight with an error and close; kill: close now.
  virtual void drain() = 0;
  virtual void cut() = 0;
  virtual void kill() = 0;
};

// Connection accounting, shared with every connection so that a connection destroyed late
// (with its io_context) still finds it.
struct Registry {
  // admit() before a connection exists, release() when it is gone.
  bool admit(const std::string& addr, const HttpLimits& lim) {
    std::lock_guard lock(mu);
    if (total >= lim.max_connections) return false;
    if (!addr.empty() && per_peer[addr] >= lim.max_connections_per_peer) return false;
    ++total;
    if (!addr.empty()) ++per_peer[addr];
    return true;
  }
  void add(ConnectionBase* c, std::weak_ptr<ConnectionBase> w) {
    std::lock_guard lock(mu);
    conns.emplace(c, std::move(w));
  }
  void release(ConnectionBase* c, const std::string& addr) {
    {
      std::lock_guard lock(mu);
      conns.erase(c);
      --total;
      if (!addr.empty() && --per_peer[addr] == 0) per_peer.erase(addr);
    }
    gone.notify_all();
  }
  std::vector<std::shared_ptr<ConnectionBase>> snapshot() {
    std::lock_guard lock(mu);
    std::vector<std::shared_ptr<ConnectionBase>> out;
    for (auto& [_, w] : conns)
      if (auto s = w.lock()) out.push_back(std::move(s));
    return out;
  }
  bool wait_gone(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mu);
    return gone.wait_until(lock, deadline, [&] { return total == 0; });
  }
  size_t open() {
    std::lock_guard lock(mu);
    return total;
  }

  std::mutex mu;
  std::condition_variable gone;
  size_t total = 0;
  std::map<std::string, size_t> per_peer;
  std::unordered_map<ConnectionBase*, std::weak_ptr<ConnectionBase>> conns;
};

}  // namespace

struct HttpTransport::Impl {
  Impl(TransportOptions o, Handler h)
      : opts(std::move(o)),
        handler(std::move(h)),
        workers(static_cast<size_t>(opts.worker_threads)),
        retry_timer(ioc) {}

  void accept_tcp();
  void accept_uds();
  void refuse(tcp::socket sock);
  void retry_accept(void (Impl::*again)());

  TransportOptions opts;
  Handler handler;
  std::shared_ptr<Registry> registry = std::make_shared<Registry>();
  asio::io_context ioc;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  std::vector<std::thread> io_threads;
  asio::thread_pool workers;
  std::unique_ptr<ssl::context> tls;
  std::optional<tcp::acceptor> tcp_acceptor;
  std::optional<local::acceptor> uds_acceptor;
  asio::steady_timer retry_timer;
  std::atomic<bool> draining{false};
};

namespace {

using Impl = HttpTransport::Impl;

template <class Stream>
constexpr bool kIsTls = std::is_same_v<Stream, ssl::stream<tcp::socket>>;

// One client connection. Every member is touched on the connection's strand only, except
// notify_pending_ (the engine thread's wake-up).
template <class Stream>
class Connection : public ConnectionBase, public std::enable_shared_from_this<Connection<Stream>> {
 public:
  Connection(Impl& srv, Stream stream, std::string addr, std::string peer)
      : srv_(srv),
        registry_(srv.registry),
        stream_(std::move(stream)),
        exec_(stream_.get_executor()),
        addr_(std::move(addr)),
        peer_(std::move(peer)),
        read_timer_(exec_),
        write_timer_(exec_),
        poll_timer_(exec_) {}

  ~Connection() override {
    if (source_) source_->abort("client connection closed");
    registry_->release(this, addr_);
  }

  void start() {
    registry_->add(this, this->shared_from_this());
    asio::dispatch(exec_, [self = this->shared_from_this()] {
      // Accepted while stop() drains, after it took its list of connections to drain: closed
      // as it closes the idle ones (it sets `draining` before taking the list).
      if (self->srv_.draining) return self->close();
      if constexpr (kIsTls<Stream>) {
        self->arm_read_timer(self->srv_.opts.limits.header_timeout);
        self->stream_.async_handshake(ssl::stream_base::server, [self](error_code ec) {
          if (ec) return self->close();
          self->read_request();
        });
      } else {
        self->read_request();
      }
    });
  }

  void drain() override {
    asio::post(exec_, [self = this->shared_from_this()] {
      if (self->phase_ == Phase::kWorking || self->phase_ == Phase::kReplying)
        self->keep_alive_ = false;
      else
        self->close();
    });
  }

  void cut() override {
    asio::post(exec_, [self = this->shared_from_this()] {
      self->cut_ = true;
      self->keep_alive_ = false;
      if (self->phase_ == Phase::kReplying)
        self->pump();
      else if (self->phase_ != Phase::kWorking)
        self->close();
    });
  }

  void kill() override {
    asio::post(exec_, [self = this->shared_from_this()] { self->close(); });
  }

 private:
  enum class Phase { kRequest, kWorking, kReplying, kIdle, kLinger, kClosed };

  // --- timers: each expiry closes the connection unless re-armed or disarmed since ---
  void arm_read_timer(std::chrono::steady_clock::duration d) {
    const unsigned gen = ++read_gen_;
    read_timer_.expires_after(d);
    read_timer_.async_wait([self = this->shared_from_this(), gen](error_code ec) {
      if (!ec && gen == self->read_gen_) self->close();
    });
  }
  void disarm_read_timer() {
    ++read_gen_;
    read_timer_.cancel();
  }

  // --- reading a request ---
  void read_request() {
    if (srv_.draining && !first_request_) return close();
    phase_ = Phase::kRequest;
    const HttpLimits& lim = srv_.opts.limits;
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(lim.max_header_bytes));
    parser_->body_limit(lim.max_body_bytes);
    // A new connection's first request counts from the accept; a kept-alive one's from its
    // first byte (read by watch_client while idle).
    if (!first_request_ || !kIsTls<Stream>) arm_read_timer(lim.header_timeout);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(error_code ec) {
    if (phase_ == Phase::kClosed) return;
    const HttpLimits& lim = srv_.opts.limits;
    if (ec == http::error::header_limit)
      return refuse(431, fmt::format("the request headers exceed {} bytes", lim.max_header_bytes));
    if (ec == http::error::body_limit) return refuse_body_limit();
    if (ec && ec.category() == http::make_error_code(http::error::bad_target).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message)
      return refuse(400, "malformed HTTP request: " + ec.message());
    if (ec) return close();

    const auto& req = parser_->get();
    if (req.target().size() > lim.max_uri_bytes)
      return refuse(414, fmt::format("the request target exceeds {} bytes", lim.max_uri_bytes));
    size_t count = 0;
    for (auto it = req.begin(); it != req.end(); ++it) ++count;
    if (count > lim.max_header_count)
      return refuse(431, fmt::format("the request has {} header fields; at most {} are accepted",
                                     count, lim.max_header_count));
    if (auto it = req.find(http::field::content_encoding);
        it != req.end() && !identity_only(it->value()))
      return refuse(415, fmt::format("Content-Encoding '{}' is not supported; send the body "
                                     "uncompressed",
                                     std::string_view(it->value())));
    if (auto it = req.find(http::field::transfer_encoding);
        it != req.end() && !iequals(it->value(), "chunked"))
      return refuse(501, fmt::format("Transfer-Encoding '{}' is not supported (only chunked)",
                                     std::string_view(it->value())));
    const bool has_body_method = req.method() == http::verb::post ||
                                 req.method() == http::verb::put ||
                                 req.method() == http::verb::patch;
    if (has_body_method && !parser_->content_length() && !parser_->chunked())
      return refuse(411, "a request body needs Content-Length or chunked Transfer-Encoding");
    if (parser_->is_done()) return on_request();

    arm_read_timer(lim.body_timeout);
    if (auto it = req.find(http::field::expect);
        it != req.end() && iequals(it->value(), "100-continue")) {
      auto cont = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      asio::async_write(stream_, asio::buffer(*cont),
                        [self = this->shared_from_this(), cont](error_code ec, size_t) {
                          if (ec) return self->close();
                          self->read_body();
                        });
      return;
    }
    read_body();
  }

  void read_body() {
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](error_code ec, size_t) {
                       if (self->phase_ == Phase::kClosed) return;
                       if (ec == http::error::body_limit) return self->refuse_body_limit();
                       if (ec) return self->close();
                       self->on_request();
                     });
  }

  void refuse_body_limit() {
    refuse(413, fmt::format("the request body exceeds {} bytes", srv_.opts.limits.max_body_bytes));
  }

  void on_request() {
    disarm_read_timer();
    first_request_ = false;
    auto msg = parser_->release();
    parser_.reset();
    HttpRequest req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    for (const auto& f : msg) req.headers.emplace_back(f.name_string(), f.value());
    req.body = std::move(msg.body());
    req.peer = peer_;
    keep_alive_ = msg.keep_alive() && !srv_.draining;
    method_ = req.method;
    target_ = req.target;

    Dispatch d;
    try {
      d = srv_.handler(std::move(req));
    } catch (...) {
      d.reply = current_exception_reply();
    }
    extra_headers_ = std::move(d.headers);
    if (!d.work) return on_reply(std::move(d.reply));
    phase_ = Phase::kWorking;
    watch_client();
    asio::post(srv_.workers, [self = this->shared_from_this(), work = std::move(d.work)] {
      Reply r;
      try {
        r = work();
      } catch (...) {
        r = current_exception_reply();
      }
      asio::post(self->exec_, [self, r = std::move(r)]() mutable { self->on_reply(std::move(r)); });
    });
  }

  // --- answering ---
  void on_reply(Reply r) {
    if (phase_ == Phase::kClosed) {
      if (r.source) r.source->abort("client connection closed");
      return;
    }
    if (cut_) {
      if (r.source) r.source->abort("the server is shutting down");
      return write_response(error_reply(503, "the server is shutting down"));
    }
    if (!r.source) return write_response(std::move(r));
    phase_ = Phase::kReplying;
    status_ = r.status;
    content_type_ = std::move(r.content_type);
    streaming_ = r.streaming;
    source_ = std::move(r.source);
    source_->set_notify([weak = this->weak_from_this()] {
      auto self = weak.lock();
      if (!self || self->notify_pending_.exchange(true)) return;
      asio::post(self->exec_, [self] {
        self->notify_pending_ = false;
        self->pump();
      });
    });
    watch_client();
    if (!streaming_) return pump();
    std::string head = header_block(status_, content_type_, std::nullopt);
    write(std::move(head), [](Connection& c) { c.pump(); });
  }

  // Pulls what the source has when no write is in flight: the stream's backpressure.
  void pump() {
    if (phase_ != Phase::kReplying || writing_ || !source_) return;
    std::string out;
    if (cut_) {
      out = source_->abort("the server is shutting down");
      source_.reset();
      if (!streaming_) return write_response(error_reply(500, "the server is shutting down"));
      return write(chunk(out) + "0\r\n\r\n", [](Connection& c) { c.finish(); });
    }
    bool done;
    try {
      done = source_->pull(out);
    } catch (...) {
      source_.reset();
      return write_response(current_exception_reply());
    }
    if (!streaming_) {
      if (!done) return arm_poll();
      source_.reset();
      Reply r;
      r.status = status_;
      r.content_type = content_type_;
      r.body = std::move(out);
      return write_response(std::move(r));
    }
    if (done) {
      source_.reset();
      return write(chunk(out) + "0\r\n\r\n", [](Connection& c) { c.finish(); });
    }
    if (out.empty()) return arm_poll();
    write(chunk(out), [](Connection& c) { c.pump(); });
  }

  void arm_poll() {
    poll_timer_.expires_after(kPollInterval);
    poll_timer_.async_wait([self = this->shared_from_this()](error_code ec) {
      if (!ec) self->pump();
    });
  }

  std::string header_block(int status, const std::string& content_type,
                           std::optional<size_t> content_length) const {
    std::string h = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\n", status,
                                reason_phrase(status), content_type);
    if (content_length)
      h += fmt::format("Content-Length: {}\r\n", *content_length);
    else
      h += "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n";
    for (const auto& [k, v] : extra_headers_) h += fmt::format("{}: {}\r\n", k, v);
    h += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    return h;
  }

  void write_response(Reply r) {
    phase_ = Phase::kReplying;
    status_ = r.status;
    std::string data = header_block(r.status, r.content_type, r.body.size()) + r.body;
    write(std::move(data), [](Connection& c) { c.finish(); });
  }

  // An answer to a request that cannot be read on: sent, then the connection lingers and closes.
  void refuse(int status, const std::string& message) {
    parser_.reset();
    disarm_read_timer();
    keep_alive_ = false;
    method_ = "-";
    target_ = "-";
    extra_headers_.clear();
    write_response(error_reply(status, message));
  }

  template <class Then>
  void write(std::string data, Then then) {
    writing_ = true;
    auto buf = std::make_shared<std::string>(std::move(data));
    const unsigned gen = ++write_gen_;
    write_timer_.expires_after(srv_.opts.limits.send_timeout);
    write_timer_.async_wait([self = this->shared_from_this(), gen](error_code ec) {
      if (!ec && gen == self->write_gen_) self->close();
    });
    asio::async_write(stream_, asio::buffer(*buf),
                      [self = this->shared_from_this(), buf, then](error_code ec, size_t) {
                        self->writing_ = false;
                        ++self->write_gen_;
                        self->write_timer_.cancel();
                        if (ec) return self->close();
                        then(*self);
                      });
  }

  void finish() {
    MLS_LOG_INFO("{} - \"{} {} HTTP/1.1\" {}", peer_, method_, target_, status_);
    if (!keep_alive_ || cut_) return linger_close();
    if (buffer_.size() > 0 && !watching_) return read_request();  // pipelined: answered in order
    phase_ = Phase::kIdle;
    arm_read_timer(srv_.opts.limits.keep_alive_timeout);
    watch_client();
  }

  // --- watching the socket between requests and while answering ---
  void watch_client() {
    if (watching_ || buffer_.size() > 0) return;
    watching_ = true;
    stream_.async_read_some(buffer_.prepare(kWatchReadBytes),
                            [self = this->shared_from_this()](error_code ec, size_t n) {
                              self->watching_ = false;
                              if (ec) return self->close();  // gone: close aborts its request
                              self->buffer_.commit(n);
                              if (self->phase_ == Phase::kIdle) self->read_request();
                              if (self->phase_ == Phase::kLinger) self->linger_drop();
                            });
  }

  void linger_close() {
    phase_ = Phase::kLinger;
    if constexpr (kIsTls<Stream>) {
      close();
    } else {
      error_code ec;
      stream_.shutdown(asio::socket_base::shutdown_send, ec);
      arm_read_timer(kLingerTimeout);
      linger_drop();
    }
  }

  void linger_drop() {
    buffer_.consume(buffer_.size());
    if (!watching_) watch_client();
  }

  void close() {
    if (phase_ == Phase::kClosed) return;
    phase_ = Phase::kClosed;
    if (source_) {
      source_->abort("client connection closed");
      source_.reset();
    }
    ++read_gen_;
    ++write_gen_;
    read_timer_.cancel();
    write_timer_.cancel();
    poll_timer_.cancel();
    error_code ec;
    beast::get_lowest_layer(stream_).close(ec);
  }

  Impl& srv_;
  std::shared_ptr<Registry> registry_;
  Stream stream_;
  asio::any_io_executor exec_;
  std::string addr_;
  std::string peer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  asio::steady_timer read_timer_;
  asio::steady_timer write_timer_;
  asio::steady_timer poll_timer_;
  unsigned read_gen_ = 0;
  unsigned write_gen_ = 0;
  Phase phase_ = Phase::kRequest;
  bool first_request_ = true;
  bool keep_alive_ = true;
  bool watching_ = false;
  bool writing_ = false;
  bool cut_ = false;
  std::shared_ptr<ReplySource> source_;
  bool streaming_ = false;
  std::atomic<bool> notify_pending_{false};
  int status_ = 0;
  std::string content_type_;
  HeaderList extra_headers_;
  std::string method_;
  std::string target_;
};

// A TCP connection over the caps gets this answer and is closed: never a silent hang.
class Refusal : public std::enable_shared_from_this<Refusal> {
 public:
  explicit Refusal(tcp::socket sock) : sock_(std::move(sock)), timer_(sock_.get_executor()) {
    const std::string body =
        dump_json(error_body(503, "the server has too many open connections; retry later"));
    data_ = fmt::format(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        "Content-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n{}",
        body.size(), body);
  }
  void start() {
    timer_.expires_after(std::chrono::seconds(2));
    timer_.async_wait([self = shared_from_this()](error_code) {
      error_code ec;
      self->sock_.close(ec);
    });
    asio::async_write(sock_, asio::buffer(data_), [self = shared_from_this()](error_code, size_t) {
      error_code ec;
      self->sock_.shutdown(tcp::socket::shutdown_both, ec);
      self->sock_.close(ec);
      self->timer_.cancel();
    });
  }

 private:
  tcp::socket sock_;
  asio::steady_timer timer_;
  std::string data_;
};

}  // namespace

void HttpTransport::Impl::retry_accept(void (Impl::*again)()) {
  // Out of descriptors (EMFILE) or a transient error: try again shortly rather than spin.
  retry_timer.expires_after(std::chrono::milliseconds(50));
  retry_timer.async_wait([this, again](error_code ec) {
    if (!ec) (this->*again)();
  });
}

void HttpTransport::Impl::refuse(tcp::socket sock) {
  std::make_shared<Refusal>(std::move(sock))->start();
}

void HttpTransport::Impl::accept_tcp() {
  tcp_acceptor->async_accept(asio::make_strand(ioc), [this](error_code ec, tcp::socket sock) {
    if (ec == asio::error::operation_aborted || !tcp_acceptor->is_open()) return;
    if (ec) return retry_accept(&Impl::accept_tcp);
    error_code ignored;
    sock.set_option(tcp::no_delay(true), ignored);  // stream chunks are small
    const tcp::endpoint ep = sock.remote_endpoint(ignored);
    const std::string addr = ep.address().to_string();
    const std::string peer = fmt::format("{}:{}", addr, ep.port());
    if (!registry->admit(addr, opts.limits)) {
      MLS_LOG_WARN("{}: refused (connection limit: {} in all, {} per peer)", peer,
                   opts.limits.max_connections, opts.limits.max_connections_per_peer);
      if (tls)
        sock.close(ignored);
      else
        refuse(std::move(sock));
    } else if (tls) {
      std::make_shared<Connection<ssl::stream<tcp::socket>>>(
          *this, ssl::stream<tcp::socket>(std::move(sock), *tls), addr, peer)
          ->start();
    } else {
      std::make_shared<Connection<tcp::socket>>(*this, std::move(sock), addr, peer)->start();
    }
    accept_tcp();
  });
}

void HttpTransport::Impl::accept_uds() {
  uds_acceptor->async_accept(asio::make_strand(ioc), [this](error_code ec, local::socket sock) {
    if (ec == asio::error::operation_aborted || !uds_acceptor->is_open()) return;
    if (ec) return retry_accept(&Impl::accept_uds);
    if (!registry->admit("", opts.limits)) {
      error_code ignored;
      sock.close(ignored);
    } else {
      std::make_shared<Connection<local::socket>>(*this, std::move(sock), "", "unix:" + opts.uds)
          ->start();
    }
    accept_uds();
  });
}

HttpTransport::HttpTransport(TransportOptions opts, Handler handler)
    : impl_(std::make_unique<Impl>(std::move(opts), std::move(handler))) {}

HttpTransport::~HttpTransport() {
  stop(std::chrono::milliseconds(0));
}

int HttpTransport::start() {
  Impl& s = *impl_;
  // Every connection is a descriptor: allow as many as the hard limit does.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (!s.opts.ssl_certfile.empty() || !s.opts.ssl_keyfile.empty()) {
    if (s.opts.ssl_certfile.empty() || s.opts.ssl_keyfile.empty())
      raise<ConfigError>("TLS needs both --ssl-certfile and --ssl-keyfile");
    s.tls = make_tls_context(s.opts.ssl_certfile, s.opts.ssl_keyfile);
  }
  int port = 0;
  error_code ec;
  if (!s.opts.uds.empty()) {
    namespace fs = std::filesystem;
    std::error_code fec;
    if (fs::is_socket(s.opts.uds, fec)) fs::remove(s.opts.uds, fec);  // a past run's socket
    s.uds_acceptor.emplace(s.ioc);
    s.uds_acceptor->open(local(), ec);
    if (!ec) s.uds_acceptor->bind(local::endpoint(s.opts.uds), ec);
    if (!ec) s.uds_acceptor->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) raise<IoError>("cannot listen on the Unix socket {}: {}", s.opts.uds, ec.message());
    s.accept_uds();
  } else {
    const asio::ip::address addr = asio::ip::make_address(s.opts.host, ec);
    if (ec) raise<ConfigError>("--host {}: not an IP address ({})", s.opts.host, ec.message());
    const tcp::endpoint ep(addr, static_cast<unsigned short>(s.opts.port));
    s.tcp_acceptor.emplace(s.ioc);
    s.tcp_acceptor->open(ep.protocol(), ec);
    if (!ec) s.tcp_acceptor->set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) s.tcp_acceptor->bind(ep, ec);
    if (!ec) s.tcp_acceptor->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) raise<IoError>("cannot listen on {}:{}: {}", s.opts.host, s.opts.port, ec.message());
    port = s.tcp_acceptor->local_endpoint().port();
    s.accept_tcp();
  }
  s.guard.emplace(s.ioc.get_executor());
  for (int i = 0; i < s.opts.io_threads; ++i) s.io_threads.emplace_back([&s] { s.ioc.run(); });
  return port;
}

void HttpTransport::stop(std::chrono::milliseconds grace) {
  Impl& s = *impl_;
  if (s.io_threads.empty()) return;
  s.draining = true;
  asio::post(s.ioc, [&s] {
    error_code ec;
    if (s.tcp_acceptor) s.tcp_acceptor->close(ec);
    if (s.uds_acceptor) s.uds_acceptor->close(ec);
    s.retry_timer.cancel();
  });
  Registry& reg = *s.registry;
  for (auto& c : reg.snapshot()) c->drain();
  if (!reg.wait_gone(std::chrono::steady_clock::now() + grace)) {
    for (auto& c : reg.snapshot()) c->cut();
    if (!reg.wait_gone(std::chrono::steady_clock::now() + kCutWriteTimeout)) {
      for (auto& c : reg.snapshot()) c->kill();
      reg.wait_gone(std::chrono::steady_clock::now() + kCutWriteTimeout);
    }
  }
  s.workers.join();
  s.guard.reset();
  s.ioc.stop();
  for (std::thread& t : s.io_threads) t.join();
  s.io_threads.clear();
  if (!s.opts.uds.empty()) {
    std::error_code ec;
    std::filesystem::remove(s.opts.uds, ec);
  }
}

size_t HttpTransport::open_connections() const {
  return impl_->registry->open();
}

}  // namespace mls::server
