//! Raw setting values as they arrive from keyword arguments, URL queries, JSON and the
//! environment, and the checks that turn them into typed values. Every check names the field
//! (or the variable it came from) and the accepted range, and shows the offending value the
//! way a Python user wrote it (`'http'`, `2.5`, `True`).

use crate::error::{Error, Result};
use crate::secret::Secret;
use std::fmt;

/// One setting as given. Text covers URL query values and environment variables, which are
/// always text; numbers in text are accepted wherever a number is (LMCache's JSON parsers call
/// `float()`/`int()` on them too).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A string.
    Text(String),
    /// An integer (a Python int beyond `i64` arrives as a float).
    Int(i64),
    /// A real number.
    Float(f64),
    /// A Python bool (never taken for an integer).
    Bool(bool),
    /// A password already wrapped as a [`Secret`].
    Secret(Secret),
    /// A nested block (LMCache's `"eviction": {...}`).
    Map(Vec<(String, Value)>),
    /// Anything else (a list, an object): always refused, shown by its type and repr.
    Other {
        /// The Python type's name, for the message.
        type_name: String,
        /// The value's Python `repr`, for the message.
        repr: String,
    },
}

impl Value {
    /// The Python type name, for "must be a str, not int".
    pub fn type_name(&self) -> &str {
        match self {
            Value::Other { type_name, .. } => type_name,
            Value::Text(_) => "str",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Bool(_) => "bool",
            Value::Secret(_) => "Secret",
            Value::Map(_) => "dict",
        }
    }
}

/// Python's `repr` of the value, which is how the user wrote it. A secret never shows.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Text(text) if text.contains('\'') && !text.contains('"') => write!(f, "\"{text}\""),
            Value::Text(text) => write!(f, "'{}'", text.replace('\'', "\\'")),
            Value::Int(n) => write!(f, "{n}"),
            Value::Float(x) if x.is_nan() => f.write_str("nan"),
            Value::Float(x) if x.is_infinite() => f.write_str(if *x > 0.0 { "inf" } else { "-inf" }),
            Value::Float(x) if x.fract() == 0.0 && x.abs() < 1e16 => write!(f, "{x:.1}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Bool(flag) => f.write_str(if *flag { "True" } else { "False" }),
            Value::Secret(_) => f.write_str("'***'"),
            Value::Map(_) => f.write_str("{...}"),
            Value::Other { repr, .. } => f.write_str(repr),
        }
    }
}

/// A value and the name to blame it on: the setting (`num_workers`), a nested one
/// (`eviction.eviction_ratio`) or the environment variable it came from.
pub struct Given<'a> {
    /// The name errors blame.
    pub name: &'a str,
    /// The value as given.
    pub value: &'a Value,
}

impl<'a> Given<'a> {
    fn refuse(&self, expected: &str) -> Error {
        Error::invalid(format!("{} must be {expected}, got {}", self.name, self.value))
    }

    fn refuse_type(&self, expected: &str) -> Error {
        Error::invalid(format!("{} must be {expected}, not {}", self.name, self.value.type_name()))
    }

    /// An integer in `low..=high`: an int, an integral float, or decimal digits.
    pub fn integer(&self, low: u64, high: u64) -> Result<u64> {
        let expected = format!("an integer in {low}..{high}");
        let number = match self.value {
            Value::Int(n) => u64::try_from(*n).ok(),
            Value::Float(x) if x.fract() == 0.0 && *x >= 0.0 && *x <= u64::MAX as f64 => Some(*x as u64),
            Value::Text(text) => {
                let text = text.trim();
                (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())).then(|| text.parse().ok()).flatten()
            }
            _ => None,
        };
        number.filter(|n| (low..=high).contains(n)).ok_or_else(|| self.refuse(&expected))
    }

    /// A finite real number; numeric text counts. `range` is only for the message.
    pub fn number(&self, range: &str) -> Result<f64> {
        let number = match self.value {
            Value::Int(n) => Some(*n as f64),
            Value::Float(x) => Some(*x),
            Value::Text(text) => parse_python_float(text.trim()),
            _ => None,
        };
        number.filter(|x| x.is_finite()).ok_or_else(|| self.refuse(&format!("a number {range}")))
    }

    /// A number of seconds > 0.
    pub fn seconds(&self) -> Result<std::time::Duration> {
        let expected = "a positive number of seconds";
        let seconds = self.number("").map_err(|_| self.refuse(expected))?;
        if seconds <= 0.0 || seconds > 1e9 {
            return Err(self.refuse(expected));
        }
        Ok(std::time::Duration::from_secs_f64(seconds))
    }

    /// A share in (0, 1].
    pub fn fraction(&self) -> Result<f64> {
        let share = self.number("in (0, 1]")?;
        if share > 0.0 && share <= 1.0 { Ok(share) } else { Err(self.refuse("in (0, 1]")) }
    }

    /// A flag: a bool, or text such as `true`/`false`, `1`/`0`, `yes`/`no`, `on`/`off`.
    pub fn flag(&self) -> Result<bool> {
        match self.value {
            Value::Bool(flag) => Ok(*flag),
            Value::Int(n @ (0 | 1)) => Ok(*n == 1),
            Value::Text(text) => match text.trim().to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => Ok(true),
                "false" | "0" | "no" | "off" => Ok(false),
                _ => Err(self.refuse("true or false")),
            },
            _ => Err(self.refuse("true or false")),
        }
    }

    /// A string; other types are refused.
    pub fn text(&self) -> Result<&'a str> {
        match self.value {
            Value::Text(text) => Ok(text),
            _ => Err(self.refuse_type("a str")),
        }
    }

    /// A file or directory path: non-empty text, as given (relative to the working directory).
    pub fn path(&self) -> Result<std::path::PathBuf> {
        match self.text()? {
            "" => Err(self.refuse("a path")),
            text => Ok(text.into()),
        }
    }

    /// A password: text, or an already wrapped secret.
    pub fn secret(&self) -> Result<Secret> {
        match self.value {
            Value::Text(text) => Ok(Secret::new(text.clone())),
            Value::Secret(secret) => Ok(secret.clone()),
            _ => Err(self.refuse_type("a str")),
        }
    }

    /// A nested block; other types are refused, with `example` as a sample of the form.
    pub fn map(&self, example: &str) -> Result<&'a [(String, Value)]> {
        match self.value {
            Value::Map(entries) => Ok(entries),
            _ => Err(self.refuse_type(&format!("an object like {example}"))),
        }
    }
}

/// What Python's `float()` accepts, minus exotic spellings: decimal and exponent notation,
/// `inf` and `nan` (which the finiteness check then rejects with the usual message).
fn parse_python_float(text: &str) -> Option<f64> {
    if text.is_empty() || text.contains('_') {
        return None;
    }
    text.parse::<f64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn given(value: Value) -> (String, Value) {
        ("num_workers".into(), value)
    }

    fn check<T>(value: Value, run: impl Fn(&Given<'_>) -> Result<T>) -> Result<T> {
        let (name, value) = given(value);
        run(&Given { name: &name, value: &value })
    }

    #[test]
    fn values_print_as_python_would() {
        assert_eq!(Value::Text("http".into()).to_string(), "'http'");
        assert_eq!(Value::Float(2.5).to_string(), "2.5");
        assert_eq!(Value::Float(40.0).to_string(), "40.0");
        assert_eq!(Value::Float(f64::INFINITY).to_string(), "inf");
        assert_eq!(Value::Bool(true).to_string(), "True");
        assert_eq!(Value::Int(-1).to_string(), "-1");
        assert_eq!(Value::Secret(Secret::new("hunter2")).to_string(), "'***'");
    }

    #[test]
    fn integers_accept_ints_integral_floats_and_digits_only() {
        assert_eq!(check(Value::Int(8), |g| g.integer(1, 1024)).unwrap(), 8);
        assert_eq!(check(Value::Float(4.0), |g| g.integer(1, 1024)).unwrap(), 4);
        assert_eq!(check(Value::Text(" 16 ".into()), |g| g.integer(1, 1024)).unwrap(), 16);
        for bad in [Value::Float(2.5), Value::Bool(true), Value::Text("+3".into()), Value::Int(0), Value::Int(1025)] {
            let err = check(bad.clone(), |g| g.integer(1, 1024)).unwrap_err();
            assert_eq!(err.message(), format!("num_workers must be an integer in 1..1024, got {bad}"));
        }
    }

    #[test]
    fn numbers_seconds_fractions_and_flags() {
        assert_eq!(check(Value::Text("1.5".into()), |g| g.number(">= 0")).unwrap(), 1.5);
        assert!(check(Value::Text("inf".into()), |g| g.number(">= 0")).is_err());
        assert!(check(Value::Bool(true), |g| g.number(">= 0")).is_err());
        assert_eq!(check(Value::Int(3), |g| g.seconds()).unwrap(), std::time::Duration::from_secs(3));
        assert!(check(Value::Int(0), |g| g.seconds()).is_err());
        assert!(check(Value::Float(f64::NAN), |g| g.seconds()).is_err());
        assert_eq!(check(Value::Float(1.0), |g| g.fraction()).unwrap(), 1.0);
        assert!(check(Value::Float(0.0), |g| g.fraction()).is_err());
        assert!(check(Value::Text("yes".into()), |g| g.flag()).unwrap());
        assert!(!check(Value::Text("0".into()), |g| g.flag()).unwrap());
        assert!(check(Value::Text("maybe".into()), |g| g.flag()).is_err());
    }

    #[test]
    fn type_errors_name_the_python_type() {
        let err = check(Value::Int(5), |g| g.text().map(str::to_owned)).unwrap_err();
        assert_eq!(err.message(), "num_workers must be a str, not int");
    }
}
