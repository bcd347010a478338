// Job schedules: parsing the CLI's --at / --nightly values and working out the next nightly run
// in local time. Local time is the process's zone (TZ, else /etc/localtime) through mktime with
// tm_isdst = -1, so tests fix the zone with setenv("TZ", ...) + tzset().
#pragma once

#include <cstdint>
#include <string>

#include "engine/common/expected.h"

namespace spw::app {

/// "HH:MM" (00:00..23:59) -> minutes after midnight. Errors say what is wrong.
Expected<int> parse_hhmm(const std::string& s);
/// Minutes after midnight -> "HH:MM".
std::string format_hhmm(int minute);

/// An ISO 8601 date-time -> unix seconds: "YYYY-MM-DDTHH:MM[:SS]" (a space instead of 'T'
/// works too) in local time, or with "Z" / "+HH:MM" / "-HH:MM" for an explicit offset; a bare
/// "YYYY-MM-DD" is local midnight. A local time that does not exist (skipped by a DST change)
/// is an error naming it.
Expected<int64_t> parse_iso8601(const std::string& s);
/// Unix seconds -> "YYYY-MM-DD HH:MM:SS ZONE" in local time (listing); "-" for 0.
std::string format_local_time(int64_t unix_s);

/// The first moment strictly after `now` (unix seconds) at which the local wall clock shows
/// `minute` (minutes after midnight, 0..1439). Across DST changes: a time skipped in spring
/// (02:30 in Europe/Berlin on the last Sunday of March) runs when the clock jumps past it
/// (03:00 CEST that night); a time that occurs twice in autumn runs at its first occurrence.
int64_t next_nightly(int64_t now, int minute);

}  // namespace spw::app
