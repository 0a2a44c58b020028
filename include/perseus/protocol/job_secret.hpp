#pragma once
// A job's secret (docs/server.md#who-may-do-what): every request that changes the job carries it.
// A client asks for one when it registers the job (header Perseus-Job-Secret: "new"), or brings one
// it made: the ranks of a job whose rank 0 could not reach the server at start all register the
// job with the secret rank 0 shared, and the server makes one job of their registrations.
#include <string>
#include <string_view>

namespace perseus::protocol {

// The header value that asks the server for a secret.
inline constexpr std::string_view kAskForJobSecret = "new";

// 128 random bits as 32 lowercase hexadecimal digits.
std::string new_job_secret();

// A secret a client may bring: 32 to 128 lowercase hexadecimal digits.
bool is_job_secret(std::string_view text);

}  // namespace perseus::protocol
