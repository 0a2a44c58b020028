#pragma once
// The server speaks the wire protocol (perseus/protocol/): its messages, codecs and checks, named
// here as in the server's own namespace.
#include "perseus/protocol/job_outcome.hpp"
#include "perseus/protocol/models.hpp"
#include "perseus/protocol/physical_bounds.hpp"
#include "perseus/protocol/power_mode.hpp"
#include "perseus/protocol/replies.hpp"

namespace perseus::server {
using namespace perseus::protocol;
}  // namespace perseus::server
