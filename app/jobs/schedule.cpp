#include "app/jobs/schedule.h"

#include <cctype>
#include <cstdio>
#include <ctime>
#include <optional>
#include <vector>

#include <fmt/format.h>

namespace spw::app {
namespace {

struct LocalDate {
  int year = 0, month = 0, day = 0;  // month 1..12
  auto operator<=>(const LocalDate&) const = default;
};

std::tm local_tm(int64_t t) {
  const std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  localtime_r(&tt, &tm);
  return tm;
}

LocalDate date_of(const std::tm& tm) { return {tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday}; }

int64_t make_local(const LocalDate& d, int hour, int minute, int sec, int isdst) {
  std::tm tm{};
  tm.tm_year = d.year - 1900;
  tm.tm_mon = d.month - 1;
  tm.tm_mday = d.day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = sec;
  tm.tm_isdst = isdst;
  return static_cast<int64_t>(std::mktime(&tm));
}

// The date `k` days after date `d` (through noon, which exists on every date).
LocalDate add_days(const LocalDate& d, int k) {
  std::tm tm{};
  tm.tm_year = d.year - 1900;
  tm.tm_mon = d.month - 1;
  tm.tm_mday = d.day + k;
  tm.tm_hour = 12;
  tm.tm_isdst = -1;
  const std::time_t t = std::mktime(&tm);
  return date_of(local_tm(static_cast<int64_t>(t)));
}

// The first moment of date `d` whose wall clock shows `minute` or later: exactly the time when
// it exists (its first occurrence when it occurs twice), else the end of the DST gap.
int64_t first_at_or_after(const LocalDate& d, int minute) {
  const int hh = minute / 60, mm = minute % 60;
  std::optional<int64_t> best;
  for (int isdst : {0, 1, -1}) {
    const int64_t t = make_local(d, hh, mm, 0, isdst);
    const std::tm back = local_tm(t);
    if (date_of(back) == d && back.tm_hour == hh && back.tm_min == mm && back.tm_sec == 0) {
      if (!best || t < *best) best = t;
    }
  }
  if (best) return *best;
  // A gap (the clock jumps over the time): binary search for the first second at or past it.
  // Without an overlap on the same day, (date, minute-of-day) only grows with t.
  const int64_t noon = make_local(d, 12, 0, 0, -1);
  int64_t lo = noon - 14 * 3600, hi = noon + 14 * 3600;  // lo before, hi after (or at)
  auto reached = [&](int64_t t) {
    const std::tm tm = local_tm(t);
    const LocalDate td = date_of(tm);
    if (td != d) return td > d;
    return tm.tm_hour * 60 + tm.tm_min >= minute;
  };
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (reached(mid) ? hi : lo) = mid;
  }
  return hi;
}

bool all_digits(const std::string& s, size_t pos, size_t n) {
  if (pos + n > s.size()) return false;
  for (size_t i = pos; i < pos + n; ++i)
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

int num(const std::string& s, size_t pos, size_t n) { return std::stoi(s.substr(pos, n)); }

// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

int days_in_month(int y, int m) {
  static const int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kDays[m - 1];
}

}  // namespace

Expected<int> parse_hhmm(const std::string& s) {
  const size_t colon = s.find(':');
  if (colon == std::string::npos || colon == 0 || colon > 2 || s.size() != colon + 3 ||
      !all_digits(s, 0, colon) || !all_digits(s, colon + 1, 2)) {
    return make_error("'{}' is not a time of day: use HH:MM (24-hour, e.g. 02:30)", s);
  }
  const int h = num(s, 0, colon), m = num(s, colon + 1, 2);
  if (h > 23 || m > 59) return make_error("'{}' is not a time of day (00:00 to 23:59)", s);
  return h * 60 + m;
}

std::string format_hhmm(int minute) { return fmt::format("{:02}:{:02}", minute / 60, minute % 60); }

Expected<int64_t> parse_iso8601(const std::string& s) {
  auto bad = [&]() {
    return make_error(
        "'{}' is not an ISO 8601 date-time: use YYYY-MM-DDTHH:MM[:SS] (local time) or add Z or "
        "+HH:MM",
        s);
  };
  if (!all_digits(s, 0, 4) || s.size() < 10 || s[4] != '-' || !all_digits(s, 5, 2) || s[7] != '-' ||
      !all_digits(s, 8, 2))
    return bad();
  LocalDate d{num(s, 0, 4), num(s, 5, 2), num(s, 8, 2)};
  if (d.month < 1 || d.month > 12 || d.day < 1 || d.day > days_in_month(d.year, d.month))
    return make_error("'{}': no such date", s);
  int hh = 0, mm = 0, ss = 0;
  size_t pos = 10;
  if (pos < s.size()) {
    if (s[pos] != 'T' && s[pos] != 't' && s[pos] != ' ') return bad();
    ++pos;
    if (!all_digits(s, pos, 2) || pos + 2 >= s.size() || s[pos + 2] != ':' ||
        !all_digits(s, pos + 3, 2))
      return bad();
    hh = num(s, pos, 2);
    mm = num(s, pos + 3, 2);
    pos += 5;
    if (pos < s.size() && s[pos] == ':') {
      if (!all_digits(s, pos + 1, 2)) return bad();
      ss = num(s, pos + 1, 2);
      pos += 3;
      if (pos < s.size() && s[pos] == '.') {  // fractions of a second: ignored
        ++pos;
        while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) ++pos;
      }
    }
    if (hh > 23 || mm > 59 || ss > 59) return make_error("'{}': no such time of day", s);
  }
  if (pos == s.size()) {  // local time
    const int64_t t = make_local(d, hh, mm, ss, -1);
    const std::tm back = local_tm(t);
    if (date_of(back) != d || back.tm_hour != hh || back.tm_min != mm)
      return make_error("'{}' does not exist in the local time zone (skipped by a clock change)",
                        s);
    return t;
  }
  int offset_s = 0;
  if ((s[pos] == 'Z' || s[pos] == 'z') && pos + 1 == s.size()) {
    offset_s = 0;
  } else if ((s[pos] == '+' || s[pos] == '-') && all_digits(s, pos + 1, 2)) {
    const int sign = s[pos] == '-' ? -1 : 1;
    size_t p = pos + 3;
    int oh = num(s, pos + 1, 2), om = 0;
    if (p < s.size() && s[p] == ':') ++p;
    if (p < s.size()) {
      if (!all_digits(s, p, 2) || p + 2 != s.size()) return bad();
      om = num(s, p, 2);
    }
    if (oh > 23 || om > 59) return bad();
    offset_s = sign * (oh * 3600 + om * 60);
  } else {
    return bad();
  }
  const int64_t days =
      days_from_civil(d.year, static_cast<unsigned>(d.month), static_cast<unsigned>(d.day));
  return days * 86400 + hh * 3600 + mm * 60 + ss - offset_s;
}

std::string format_local_time(int64_t unix_s) {
  if (unix_s == 0) return "-";
  const std::tm tm = local_tm(unix_s);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %Z", &tm);
  return buf;
}

int64_t next_nightly(int64_t now, int minute) {
  const LocalDate today = date_of(local_tm(now));
  for (int k = 0; k < 3; ++k) {
    const int64_t t = first_at_or_after(add_days(today, k), minute);
    if (t > now) return t;
  }
  return now + 86400;  // not reached: some day of the next three has the time
}

}  // namespace spw::app
