# Writes the chat page (IN) into a C++ header (OUT) as one raw string literal, so that the
# binary serves it without files beside it.
file(READ ${IN} CONTENT)
string(FIND "${CONTENT}" ")mls_ui\"" CLASH)
if(NOT CLASH EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter )mls_ui\"")
endif()
file(WRITE ${OUT} "// Generated from src/server/ui/chat.html by src/server/ui/embed.cmake.\n#pragma once\n\nnamespace mls::server {\n\ninline constexpr char kChatPageHtml[] = R\"mls_ui(${CONTENT})mls_ui\";\n\n}  // namespace mls::server\n")
