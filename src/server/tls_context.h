// The server's TLS context (--ssl-certfile/--ssl-keyfile) through Asio's OpenSSL binding.
#pragma once

#include <boost/asio/ssl/context.hpp>
#include <memory>
#include <string>

namespace mls::server {

// TLS 1.2 or newer with the certificate chain and private key (PEM); ConfigError naming the
// file and OpenSSL's reason when either cannot be used.
std::unique_ptr<boost::asio::ssl::context> make_tls_context(const std::string& certfile,
                                                            const std::string& keyfile);

}  // namespace mls::server
