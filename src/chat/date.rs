//! The date behind a template's `strftime_now(format)`, and Python's `strftime` over it.
//!
//! HF defines `strftime_now(format)` as `datetime.now().strftime(format)` (transformers
//! `utils/chat_template_utils.py`). Llama 3.1/3.2 templates call `strftime_now("%d %b %Y")` for
//! their "Today Date:" line. coco renders a caller-chosen calendar date instead of reading a
//! clock, so a prompt (and a shared link that replays it) is the same text on every machine and
//! every day; the page passes the visitor's local date. The time of day is midnight.

use std::fmt::Write;

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// A proleptic Gregorian calendar date (what Python's `datetime.date` holds), years 1..=9999.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Date {
    year: i32,
    month: u32,
    day: u32,
}

impl Date {
    /// 26 July 2024: the date Llama 3.1/3.2 templates fall back to ("26 Jul 2024") when
    /// `strftime_now` is not defined, so coco's default prints what those templates would.
    pub const DEFAULT: Date = Date {
        year: 2024,
        month: 7,
        day: 26,
    };

    /// Parses `YYYY-MM-DD` (ISO 8601, what `Date.prototype.toISOString().slice(0, 10)` gives).
    pub fn parse_iso(s: &str) -> Option<Date> {
        let b = s.as_bytes();
        let digits = |r: std::ops::Range<usize>| -> Option<u32> {
            let part = b.get(r)?;
            if !part.iter().all(u8::is_ascii_digit) {
                return None;
            }
            std::str::from_utf8(part).ok()?.parse().ok()
        };
        if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
            return None;
        }
        let (year, month, day) = (digits(0..4)? as i32, digits(5..7)?, digits(8..10)?);
        let valid =
            year >= 1 && (1..=12).contains(&month) && day >= 1 && day <= days_in_month(year, month);
        valid.then_some(Date { year, month, day })
    }

    /// 0 = Monday … 6 = Sunday (Python's `date.weekday()`).
    fn weekday(self) -> usize {
        // Days since 1970-01-01 (a Thursday), by Howard Hinnant's days_from_civil.
        let (y, m, d) = (self.year as i64, self.month as i64, self.day as i64);
        let y = if m <= 2 { y - 1 } else { y };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        (days + 3).rem_euclid(7) as usize
    }

    fn day_of_year(self) -> u32 {
        (1..self.month)
            .map(|m| days_in_month(self.year, m))
            .sum::<u32>()
            + self.day
    }

    /// `format` as Python's `datetime.strftime` formats this date at 00:00:00 (glibc's
    /// directives, as CPython on Linux uses them). Like glibc, an unknown directive is copied
    /// through as written (`"%Q"` → `"%Q"`), so this cannot fail.
    pub fn strftime(self, format: &str) -> String {
        let mut out = String::with_capacity(format.len() + 16);
        let mut chars = format.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            // glibc's `-` flag drops the padding (`%-d` → "9"), which templates sometimes use.
            let mut spec = chars.next();
            let unpadded = spec == Some('-');
            if unpadded {
                spec = chars.next();
            }
            let num = |out: &mut String, v: u32, width: usize, pad: char| {
                if unpadded {
                    let _ = write!(out, "{v}");
                } else if pad == '0' {
                    let _ = write!(out, "{v:0width$}");
                } else {
                    let _ = write!(out, "{v:>width$}");
                }
            };
            let month = MONTHS[self.month as usize - 1];
            let weekday = WEEKDAYS[self.weekday()];
            match spec {
                Some('d') => num(&mut out, self.day, 2, '0'),
                Some('e') => num(&mut out, self.day, 2, ' '),
                Some('m') => num(&mut out, self.month, 2, '0'),
                Some('y') => num(&mut out, (self.year % 100) as u32, 2, '0'),
                Some('Y') => {
                    let _ = write!(out, "{}", self.year);
                }
                Some('j') => num(&mut out, self.day_of_year(), 3, '0'),
                Some('b') | Some('h') => out.push_str(&month[..3]),
                Some('B') => out.push_str(month),
                Some('a') => out.push_str(&weekday[..3]),
                Some('A') => out.push_str(weekday),
                Some('u') => num(&mut out, self.weekday() as u32 + 1, 1, '0'),
                Some('w') => num(&mut out, (self.weekday() as u32 + 1) % 7, 1, '0'),
                Some('F') => {
                    let _ = write!(out, "{}-{:02}-{:02}", self.year, self.month, self.day);
                }
                Some('D') | Some('x') => {
                    let _ = write!(
                        out,
                        "{:02}/{:02}/{:02}",
                        self.month,
                        self.day,
                        self.year % 100
                    );
                }
                Some('H') | Some('M') | Some('S') => num(&mut out, 0, 2, '0'),
                Some('I') => num(&mut out, 12, 2, '0'),
                Some('p') => out.push_str("AM"),
                Some('T') | Some('X') => out.push_str("00:00:00"),
                Some('R') => out.push_str("00:00"),
                Some('c') => {
                    let _ = write!(
                        out,
                        "{} {} {:>2} 00:00:00 {}",
                        &weekday[..3],
                        &month[..3],
                        self.day,
                        self.year
                    );
                }
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('%') => out.push('%'),
                other => {
                    out.push('%');
                    if unpadded {
                        out.push('-');
                    }
                    out.extend(other);
                }
            }
        }
        out
    }
}

fn days_in_month(year: i32, month: u32) -> u32 {
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

#[cfg(test)]
mod tests {
    use super::Date;

    #[test]
    fn parses_only_real_iso_dates() {
        assert_eq!(Date::parse_iso("2024-07-26"), Some(Date::DEFAULT));
        assert!(Date::parse_iso("2024-02-29").is_some());
        for bad in [
            "2023-02-29",
            "2024-13-01",
            "2024-00-10",
            "2024-01-32",
            "0000-01-01",
            "2024-7-26",
            "26 Jul 2024",
            "2024-07-26T00:00",
            "+024-07-26",
        ] {
            assert_eq!(Date::parse_iso(bad), None, "{bad}");
        }
    }

    /// Expected strings from CPython 3.11 `datetime.datetime(y, m, d).strftime(fmt)` on Linux.
    #[test]
    fn formats_like_python() {
        let d = Date::parse_iso("2025-03-09").unwrap();
        let cases = [
            ("%d %b %Y", "09 Mar 2025"),
            ("%-d %B %Y", "9 March 2025"),
            ("%A, %a %e|%j|%u%w", "Sunday, Sun  9|068|70"),
            ("%Y-%m-%d %H:%M:%S %I%p", "2025-03-09 00:00:00 12AM"),
            (
                "%F %D %T %R %y %%",
                "2025-03-09 03/09/25 00:00:00 00:00 25 %",
            ),
            ("%c", "Sun Mar  9 00:00:00 2025"),
            ("%x %X %h", "03/09/25 00:00:00 Mar"),
        ];
        for (fmt, want) in cases {
            assert_eq!(d.strftime(fmt), want, "{fmt}");
        }
        assert_eq!(Date::DEFAULT.strftime("%d %b %Y"), "26 Jul 2024");
        let last = Date::parse_iso("2000-12-31").unwrap();
        assert_eq!(last.strftime("%j %a"), "366 Sun");
        // glibc copies what it does not know.
        assert_eq!(d.strftime("%Q|%-%|trailing %"), "%Q|%|trailing %");
    }
}
