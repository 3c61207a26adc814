// A constraint the grammar engine cannot accept: a malformed grammar, regex or schema, or a
// JSON Schema keyword outside the supported subset. The message names the construct (the
// server turns it into a 400 naming the request field).
#pragma once

#include "core/error.h"

namespace mls::grammar {

class GrammarError : public InvalidArgument {
  using InvalidArgument::InvalidArgument;
};

}  // namespace mls::grammar
