// Schedules in a fixed zone (TZ=Europe/Berlin): the next nightly run across midnight and across
// both DST changes of 2026 (29 March: 02:00 CET -> 03:00 CEST; 25 October: 03:00 CEST -> 02:00
// CET), and the --at / --nightly parsers.
#include <stdlib.h>
#include <time.h>

#include <string>

#include <gtest/gtest.h>

#include "app/jobs/schedule.h"

namespace spw::app {
namespace {

// Sets TZ for the test and restores the old value afterwards.
class ZoneGuard {
 public:
  explicit ZoneGuard(const char* zone) {
    const char* old = std::getenv("TZ");
    had_ = old != nullptr;
    if (had_) old_ = old;
    ::setenv("TZ", zone, 1);
    ::tzset();
  }
  ~ZoneGuard() {
    if (had_) {
      ::setenv("TZ", old_.c_str(), 1);
    } else {
      ::unsetenv("TZ");
    }
    ::tzset();
  }

 private:
  bool had_ = false;
  std::string old_;
};

// Unix seconds of a UTC date-time.
int64_t utc(const std::string& iso) {
  auto t = parse_iso8601(iso + "Z");
  EXPECT_TRUE(t.ok()) << iso;
  return t.ok() ? *t : 0;
}

TEST(JobSchedule, ParsesTimesOfDay) {
  EXPECT_EQ(*parse_hhmm("02:30"), 150);
  EXPECT_EQ(*parse_hhmm("0:05"), 5);
  EXPECT_EQ(*parse_hhmm("23:59"), 23 * 60 + 59);
  EXPECT_FALSE(parse_hhmm("24:00").ok());
  EXPECT_FALSE(parse_hhmm("12:60").ok());
  EXPECT_FALSE(parse_hhmm("1230").ok());
  EXPECT_FALSE(parse_hhmm("").ok());
  EXPECT_FALSE(parse_hhmm("ab:cd").ok());
  EXPECT_EQ(format_hhmm(150), "02:30");
}

TEST(JobSchedule, ParsesIso8601WithOffsetsAndLocalTime) {
  ZoneGuard tz("Europe/Berlin");
  EXPECT_EQ(*parse_iso8601("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(*parse_iso8601("2026-01-15T12:00:00Z"), 1768478400);
  EXPECT_EQ(*parse_iso8601("2026-01-15T13:00:00+01:00"), 1768478400);
  EXPECT_EQ(*parse_iso8601("2026-01-15T07:00-05:00"), 1768478400);
  EXPECT_EQ(*parse_iso8601("2026-01-15T13:00"), 1768478400);               // CET = UTC+1
  EXPECT_EQ(*parse_iso8601("2026-07-15 14:00"), utc("2026-07-15T12:00"));  // CEST = UTC+2
  EXPECT_EQ(*parse_iso8601("2026-01-15"), utc("2026-01-14T23:00"));
  EXPECT_FALSE(parse_iso8601("2026-02-30T10:00").ok());
  EXPECT_FALSE(parse_iso8601("2026-01-15T25:00").ok());
  EXPECT_FALSE(parse_iso8601("tomorrow").ok());
  EXPECT_FALSE(parse_iso8601("2026-01-15T10:00+5").ok());
  // 02:30 on 29 March 2026 does not exist in Berlin.
  auto gap = parse_iso8601("2026-03-29T02:30");
  ASSERT_FALSE(gap.ok());
  EXPECT_NE(gap.error().message.find("does not exist"), std::string::npos) << gap.error().message;
}

TEST(JobSchedule, NightlyIsLaterTodayOrTomorrowAcrossMidnight) {
  ZoneGuard tz("Europe/Berlin");
  // 22:00 CET on 10 January: 02:30 is tomorrow, 23:15 is today.
  const int64_t now = utc("2026-01-10T21:00");
  EXPECT_EQ(next_nightly(now, 150), utc("2026-01-11T01:30"));
  EXPECT_EQ(next_nightly(now, 23 * 60 + 15), utc("2026-01-10T22:15"));
  // Exactly at the time: the next day's (strictly after now).
  EXPECT_EQ(next_nightly(utc("2026-01-11T01:30"), 150), utc("2026-01-12T01:30"));
  // 23:59 local, asking for 00:00: one minute later, on the next date.
  EXPECT_EQ(next_nightly(utc("2026-01-10T22:59"), 0), utc("2026-01-10T23:00"));
  // New Year's Eve to New Year's Day.
  EXPECT_EQ(next_nightly(utc("2026-12-31T22:00"), 60), utc("2027-01-01T00:00"));
}

TEST(JobSchedule, NightlyAcrossTheSpringDstChange) {
  ZoneGuard tz("Europe/Berlin");
  // Evening of Saturday 28 March 2026 (CET, UTC+1). 01:30 exists (CET): 00:30 UTC.
  const int64_t sat_evening = utc("2026-03-28T20:00");  // 21:00 CET
  EXPECT_EQ(next_nightly(sat_evening, 90), utc("2026-03-29T00:30"));
  // 02:30 is skipped that night: the run is when the clock jumps to 03:00 CEST (01:00 UTC).
  EXPECT_EQ(next_nightly(sat_evening, 150), utc("2026-03-29T01:00"));
  // 04:00 that morning is CEST (UTC+2): 02:00 UTC, not 03:00 UTC.
  EXPECT_EQ(next_nightly(sat_evening, 240), utc("2026-03-29T02:00"));
  // The night after, 02:30 CEST exists again: 00:30 UTC on the 30th.
  EXPECT_EQ(next_nightly(utc("2026-03-29T12:00"), 150), utc("2026-03-30T00:30"));
}

TEST(JobSchedule, NightlyAcrossTheAutumnDstChange) {
  ZoneGuard tz("Europe/Berlin");
  // Evening of Saturday 24 October 2026 (CEST, UTC+2).
  const int64_t sat_evening = utc("2026-10-24T19:00");  // 21:00 CEST
  // 02:30 happens twice on the 25th (CEST then CET): the first, 00:30 UTC.
  EXPECT_EQ(next_nightly(sat_evening, 150), utc("2026-10-25T00:30"));
  // 04:00 that morning is CET (UTC+1): 03:00 UTC.
  EXPECT_EQ(next_nightly(sat_evening, 240), utc("2026-10-25T03:00"));
  // 01:30 is before the change: CEST, 23:30 UTC on the 24th.
  EXPECT_EQ(next_nightly(sat_evening, 90), utc("2026-10-24T23:30"));
  // Just after the first 02:30 ran (00:31 UTC): the next is the next night's, not the repeat.
  EXPECT_EQ(next_nightly(utc("2026-10-25T00:31"), 150), utc("2026-10-26T01:30"));
}

TEST(JobSchedule, NightlyInUtcIsPlainArithmetic) {
  ZoneGuard tz("UTC");
  EXPECT_EQ(next_nightly(utc("2026-03-29T01:00"), 150), utc("2026-03-29T02:30"));
  EXPECT_EQ(next_nightly(utc("2026-03-29T03:00"), 150), utc("2026-03-30T02:30"));
}

}  // namespace
}  // namespace spw::app
