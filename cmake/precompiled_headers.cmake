# Precompiled headers: the third-party headers the heavy targets' files all parse (CLI11 alone takes
# 6 s a file at -O3, Beast and Asio 3 s, GoogleTest, nlohmann-json and fmt 1-1.5 s each), parsed once
# per target instead of once per file. Only headers of libraries the target links, so that each is
# compiled with the definitions its package gives (spdlog's, fmt's). PERSEUS_PCH=OFF compiles every file
# with only what it includes itself: the way to check that a file includes what it uses.
# GCC 12 at -O1 (the tests' files), against a precompiled <string>, may report the copy it inlines into a
# `std::string + "text"` as out of bounds (-Warray-bounds, -Wstringop-overflow, -Wstringop-overread) where
# the same file compiles clean without the precompiled header: such a line is written with += (or joins literals).
option(PERSEUS_PCH "Precompile the heavy third-party headers of the largest targets" ON)

set(PERSEUS_PCH_STANDARD <algorithm> <cmath> <cstdint> <filesystem> <functional> <map> <memory> <optional>
                         <string> <string_view> <vector>)
set(PERSEUS_PCH_FORMATS <nlohmann/json.hpp> <fmt/format.h>)
set(PERSEUS_PCH_NETWORK <boost/asio/io_context.hpp> <boost/asio/ip/tcp.hpp> <boost/asio/post.hpp>
                        <boost/asio/steady_timer.hpp> <boost/asio/strand.hpp> <boost/beast/core.hpp>
                        <boost/beast/http.hpp>)

# perseus_precompile(TARGET HEADERS...): TARGET's files see the standard and format headers above, then
# HEADERS, precompiled (where PERSEUS_PCH is on). Every target given links nlohmann-json and fmt.
function(perseus_precompile target)
  if(PERSEUS_PCH)
    target_precompile_headers(${target} PRIVATE ${PERSEUS_PCH_STANDARD} ${PERSEUS_PCH_FORMATS} ${ARGN})
  endif()
endfunction()
