#include "server/tls_context.h"

#include "core/error.h"

namespace mls::server {

namespace ssl = boost::asio::ssl;

std::unique_ptr<ssl::context> make_tls_context(const std::string& certfile,
                                               const std::string& keyfile) {
  auto ctx = std::make_unique<ssl::context>(ssl::context::tls_server);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                   ssl::context::single_dh_use);
  boost::system::error_code ec;
  if (ctx->use_certificate_chain_file(certfile, ec))
    raise<ConfigError>("--ssl-certfile {}: {}", certfile, ec.message());
  if (ctx->use_private_key_file(keyfile, ssl::context::pem, ec))
    raise<ConfigError>("--ssl-keyfile {}: {}", keyfile, ec.message());
  return ctx;
}

}  // namespace mls::server
