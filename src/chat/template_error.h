// Errors raised by chat templates. A template that does not parse is a broken model file
// (ConfigError); a template that fails while rendering usually rejects the request itself
// (raise_exception("Conversation roles must alternate ...")), so it is an InvalidArgument that
// the server turns into a 400. Both carry "line L, column C" of the offending construct.
#pragma once

#include "core/error.h"

namespace mls::chat {

class TemplateSyntaxError : public ConfigError {
  using ConfigError::ConfigError;
};

class TemplateRuntimeError : public InvalidArgument {
  using InvalidArgument::InvalidArgument;
};

}  // namespace mls::chat
