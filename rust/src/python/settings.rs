//! `_native.Settings`, `_native.EvictionSettings` and `_native.Secret`: the one typed object
//! that crosses from Python to Rust. Python gathers the sources (keyword arguments, a URL, the
//! environment, LMCache's JSON, parsed); every check, every default and every convention of
//! LMCache's is the core's ([`crate::settings`]), and every setting's getter is its table's.

use super::errors::{invalid_input, to_py_err};
use crate::secret::Secret;
use crate::settings::{Eviction, InUrl, SETTINGS, Setting, Settings, Shown, Sources, Value};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyCFunction, PyDict, PyFloat, PyInt, PyMapping, PyString};

/// A password: shows as `***`, cannot be pickled; `reveal()` is the only way to the value.
#[pyclass(module = "lmcache_resp._native", name = "Secret", frozen)]
pub struct PySecret(pub Secret);

#[pymethods]
impl PySecret {
    #[new]
    fn new(value: &Bound<'_, PyAny>) -> PyResult<Self> {
        match value.cast::<PyString>() {
            Ok(text) => Ok(PySecret(Secret::new(utf8("password", text)?))),
            Err(_) => Err(invalid_input(format!("password must be a str, not {}", type_name(value)))),
        }
    }

    fn reveal(&self) -> &str {
        self.0.expose()
    }

    fn __repr__(&self) -> &'static str {
        "Secret('***')"
    }

    fn __str__(&self) -> &'static str {
        "***"
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PySecret>().is_ok_and(|o| o.get().0 == self.0)
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        ("Secret", self.0.expose()).hash(&mut hasher);
        hasher.finish()
    }

    fn __reduce__(&self) -> PyResult<()> {
        Err(pyo3::exceptions::PyTypeError::new_err(
            "Secret values are not picklable: pass credentials through the environment",
        ))
    }
}

/// Client-side eviction once `max_capacity_gb` is set.
#[pyclass(module = "lmcache_resp._native", name = "EvictionSettings", frozen)]
pub struct PyEviction(pub Eviction);

#[pymethods]
impl PyEviction {
    #[new]
    #[pyo3(signature = (eviction_policy=None, trigger_watermark=None, eviction_ratio=None))]
    fn new(
        eviction_policy: Option<&Bound<'_, PyAny>>,
        trigger_watermark: Option<&Bound<'_, PyAny>>,
        eviction_ratio: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let [policy, watermark, ratio] = [
            ("eviction_policy", eviction_policy),
            ("trigger_watermark", trigger_watermark),
            ("eviction_ratio", eviction_ratio),
        ]
        .map(|(name, v)| v.map(|v| to_value(name, v)).transpose());
        Eviction::from_values(policy?.flatten().as_ref(), watermark?.flatten().as_ref(), ratio?.flatten().as_ref())
            .map(PyEviction)
            .map_err(|e| to_py_err(&e))
    }

    #[getter]
    fn eviction_policy(&self) -> &'static str {
        self.0.policy.name()
    }

    #[getter]
    fn trigger_watermark(&self) -> f64 {
        self.0.trigger_watermark
    }

    #[getter]
    fn eviction_ratio(&self) -> f64 {
        self.0.eviction_ratio
    }

    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        out.set_item("eviction_policy", self.eviction_policy())?;
        out.set_item("trigger_watermark", self.0.trigger_watermark)?;
        out.set_item("eviction_ratio", self.0.eviction_ratio)?;
        Ok(out)
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PyEviction>().is_ok_and(|o| o.get().0 == self.0)
    }

    fn __repr__(&self) -> String {
        format!(
            "EvictionSettings(eviction_policy={:?}, trigger_watermark={}, eviction_ratio={})",
            self.eviction_policy(),
            self.0.trigger_watermark,
            self.0.eviction_ratio
        )
    }
}

/// Every setting, resolved and checked: `Settings(url=None, *, env=None, **explicit)`.
/// Explicit values win over the URL, the URL over `env` (a mapping such as `os.environ`; only
/// the variables of `Settings.env_vars` are read), and those over the defaults. `None` means
/// "not set". `Settings(settings)` copies one. Safe to print: the password shows as `***`, TLS
/// as its file paths.
///
/// A getter per setting is added to the class when the module loads ([`add_setting_getters`]),
/// from the settings' table: each shows its row's value.
#[pyclass(module = "lmcache_resp._native", name = "Settings", frozen, subclass)]
pub struct PySettings(pub Settings);

#[pymethods]
impl PySettings {
    #[new]
    #[pyo3(signature = (url=None, *, env=None, **explicit))]
    fn new(
        url: Option<&Bound<'_, PyAny>>,
        env: Option<&Bound<'_, PyAny>>,
        explicit: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        if let Some(settings) = url.and_then(|url| url.cast::<PySettings>().ok()) {
            if env.is_some() || explicit.is_some_and(|e| !e.is_empty()) {
                return Err(invalid_input("a Settings is copied as it is: give no env and no other setting with it"));
            }
            return Ok(PySettings(settings.get().0.clone()));
        }
        let url = match url {
            None => None,
            Some(url) => Some(
                utf8(
                    "url",
                    url.cast::<PyString>()
                        .map_err(|_| invalid_input(format!("url must be a str, not {}", type_name(url))))?,
                )?
                .to_owned(),
            ),
        };
        let given = match explicit {
            Some(explicit) => pairs(explicit.as_any())?,
            None => Vec::new(),
        };
        let environment = environment(env)?;
        let sources = Sources { explicit: &given, url: url.as_deref(), env: &environment };
        Settings::resolve(&sources).map(PySettings).map_err(|e| to_py_err(&e))
    }

    /// LMCache's L2 adapter document (a mapping), read with LMCache's conventions
    /// ([`Settings::from_lmcache`]).
    #[staticmethod]
    #[pyo3(signature = (document, *, env=None))]
    fn from_lmcache_document(document: &Bound<'_, PyAny>, env: Option<&Bound<'_, PyAny>>) -> PyResult<PySettings> {
        // None is no document (JSON's null), not "not set": refused as its type.
        let none = || Value::Other { type_name: "NoneType".into(), repr: "None".into() };
        let document = to_value("document", document)?.unwrap_or_else(none);
        Settings::from_lmcache(&document, &environment(env)?).map(PySettings).map_err(|e| to_py_err(&e))
    }

    /// What LMCache hands `RespConnector(**adapter_params)`, read with its conventions
    /// ([`Settings::from_adapter_params`]).
    #[staticmethod]
    #[pyo3(signature = (params, *, env=None, lmcache_evicts=true))]
    fn from_lmcache_params(
        params: &Bound<'_, PyAny>,
        env: Option<&Bound<'_, PyAny>>,
        lmcache_evicts: bool,
    ) -> PyResult<PySettings> {
        Settings::from_adapter_params(&pairs(params)?, &environment(env)?, lmcache_evicts)
            .map(PySettings)
            .map_err(|e| to_py_err(&e))
    }

    /// The names `Settings(**explicit)` accepts.
    #[classattr]
    fn fields() -> Vec<&'static str> {
        crate::settings::fields()
    }

    /// LMCache's `valkey`-adapter names accepted beside `fields`, each with the field it means.
    #[classattr]
    fn valkey_fields() -> Vec<(&'static str, &'static str)> {
        crate::settings::lmcache_aliases()
    }

    /// The names an `eviction` block accepts.
    #[classattr]
    fn eviction_fields() -> Vec<&'static str> {
        crate::settings::eviction_fields()
    }

    /// The environment variables read, by field.
    #[classattr]
    fn env_vars() -> Vec<(&'static str, &'static str)> {
        crate::settings::env_vars()
    }

    /// Every setting's row, for the checks of the documents that list them
    /// (py-tests/test_stubs.py): `(name, accepts, url, env, lmcache)`, where `url` is
    /// `"?name="` for a query key, the URL's form for a setting the URL itself carries, or None.
    #[classattr]
    #[allow(clippy::type_complexity)]
    fn table() -> Vec<(&'static str, &'static str, Option<String>, Option<&'static str>, Option<&'static str>)> {
        let url = |row: &Setting| match row.url {
            InUrl::Query => Some(format!("?{}=", row.name)),
            InUrl::Parsed(form) => Some(form.to_owned()),
            InUrl::Never => None,
        };
        SETTINGS.iter().map(|row| (row.name, row.accepts, url(row), row.env, row.lmcache)).collect()
    }

    /// `host:port` or `unix:/path` of the first server.
    #[getter]
    fn endpoint(&self) -> String {
        self.0.endpoint().to_string()
    }

    /// Every server named (cluster seeds, or shards).
    #[getter]
    fn endpoints(&self) -> Vec<String> {
        self.0.endpoints.iter().map(ToString::to_string).collect()
    }

    /// `max_capacity_gb` in bytes (GiB); 0 = no capacity tracking.
    #[getter]
    fn capacity_bytes(&self) -> u64 {
        self.0.capacity_bytes()
    }

    /// Settings accepted but without effect (the caller logs them).
    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.0.warnings.clone()
    }

    /// Every server named, then every setting, for logs and reports: passwords as `***`.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        out.set_item("endpoints", self.endpoints())?;
        for row in SETTINGS {
            out.set_item(row.name, to_python(py, (row.show)(&self.0), Shape::Dict)?)?;
        }
        Ok(out)
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let name = slf.get_type().name()?;
        Ok(format!("{name}({})", slf.get().0))
    }
}

/// Adds a read-only property per setting to `Settings`, from its row: the getters are the
/// table's, so a new setting needs none written here.
pub fn add_setting_getters(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    let class = py.get_type::<PySettings>();
    let property = py.import("builtins")?.getattr("property")?;
    for row in SETTINGS {
        let getter = PyCFunction::new_closure(py, None, None, move |args, _kwargs| -> PyResult<Py<PyAny>> {
            let settings = args.get_item(0)?;
            let settings = settings.cast::<PySettings>()?;
            Ok(to_python(args.py(), (row.show)(&settings.get().0), Shape::Getter)?.unbind())
        })?;
        class.setattr(row.name, property.call1((getter, py.None(), py.None(), row.doc))?)?;
    }
    Ok(())
}

/// Where a shown value goes: a getter gives a password as a `Secret` and the eviction block as
/// `EvictionSettings`; `to_dict` gives `"***"` and a dict.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Getter,
    Dict,
}

fn to_python(py: Python<'_>, shown: Shown, shape: Shape) -> PyResult<Bound<'_, PyAny>> {
    Ok(match shown {
        Shown::None => py.None().into_bound(py),
        Shown::Flag(flag) => PyBool::new(py, flag).to_owned().into_any(),
        Shown::Count(n) => n.into_pyobject(py)?.into_any(),
        Shown::Number(x) => PyFloat::new(py, x).into_any(),
        Shown::Text(text) => PyString::new(py, &text).into_any(),
        Shown::Secret(_) if shape == Shape::Dict => PyString::new(py, "***").into_any(),
        Shown::Secret(secret) => Bound::new(py, PySecret(secret))?.into_any(),
        Shown::Eviction(eviction) if shape == Shape::Dict => PyEviction(eviction).to_dict(py)?.into_any(),
        Shown::Eviction(eviction) => Bound::new(py, PyEviction(eviction))?.into_any(),
    })
}

/// The explicit settings of a mapping: `(name, value)` in its order, `None` values left out.
fn pairs(mapping: &Bound<'_, PyAny>) -> PyResult<Vec<(String, Value)>> {
    let mapping = mapping
        .cast::<PyMapping>()
        .map_err(|_| invalid_input(format!("settings must be a mapping, not {}", type_name(mapping))))?;
    let mut given = Vec::new();
    for item in mapping.items()?.iter() {
        let (name, value) = item.extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>()?;
        let name = name.str()?.to_str()?.to_owned();
        if let Some(value) = to_value(&name, &value)? {
            given.push((name, value));
        }
    }
    Ok(given)
}

/// The variables the settings read, from `env` (a mapping such as `os.environ`; None: none).
fn environment(env: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<(String, String)>> {
    let mut environment = Vec::new();
    if let Some(env) = env {
        let env = env.cast::<PyMapping>().map_err(|_| invalid_input("env must be a mapping such as os.environ"))?;
        for (_, var) in crate::settings::env_vars() {
            if let Ok(value) = env.get_item(var) {
                if let Ok(text) = value.extract::<String>() {
                    environment.push((var.to_string(), text));
                }
            }
        }
    }
    Ok(environment)
}

/// The text of `text`, the value of setting `name`; a `str` UTF-8 cannot encode (a lone
/// surrogate, as `surrogateescape` leaves for bytes that are not UTF-8) is bad input, refused
/// as such, without showing it (it may be a password), not a `UnicodeEncodeError`.
fn utf8<'a>(name: &str, text: &'a Bound<'_, PyString>) -> PyResult<&'a str> {
    text.to_str().map_err(|_| {
        invalid_input(format!(
            "{name} holds a character UTF-8 cannot encode (a lone surrogate, as decoding bytes with \
             surrogateescape leaves): give valid text"
        ))
    })
}

/// A Python value as the value of setting `name`; `None` is "not set".
pub fn to_value(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<Option<Value>> {
    if obj.is_none() {
        return Ok(None);
    }
    let value = if let Ok(flag) = obj.cast::<PyBool>() {
        Value::Bool(flag.is_true())
    } else if obj.cast::<PyInt>().is_ok() {
        match obj.extract::<i64>() {
            Ok(n) => Value::Int(n),
            Err(_) => Value::Float(obj.extract::<f64>().unwrap_or(f64::INFINITY)),
        }
    } else if let Ok(x) = obj.cast::<PyFloat>() {
        Value::Float(x.value())
    } else if let Ok(text) = obj.cast::<PyString>() {
        Value::Text(utf8(name, text)?.to_owned())
    } else if let Some(path) = fspath(name, obj)? {
        Value::Text(path)
    } else if let Ok(secret) = obj.cast::<PySecret>() {
        Value::Secret(secret.get().0.clone())
    } else if let Ok(eviction) = obj.cast::<PyEviction>() {
        let e = eviction.get().0;
        Value::Map(vec![
            ("eviction_policy".into(), Value::Text(e.policy.name().into())),
            ("trigger_watermark".into(), Value::Float(e.trigger_watermark)),
            ("eviction_ratio".into(), Value::Float(e.eviction_ratio)),
        ])
    } else if let Ok(mapping) = obj.cast::<PyMapping>() {
        let mut entries = Vec::new();
        for item in mapping.items()?.iter() {
            let (key, value) = item.extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>()?;
            let key = key.str()?.to_str()?.to_owned();
            if let Some(value) = to_value(&format!("{name}.{key}"), &value)? {
                entries.push((key, value));
            }
        }
        Value::Map(entries)
    } else {
        Value::Other { type_name: type_name(obj), repr: obj.repr().map(|r| r.to_string()).unwrap_or_default() }
    };
    Ok(Some(value))
}

/// A `str` path of an `os.PathLike` (`pathlib.Path`), for the `ssl_*` files; None for
/// anything else (a bytes path is refused as its type, like any other non-str).
fn fspath(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    if !obj.hasattr("__fspath__")? {
        return Ok(None);
    }
    let path = obj.call_method0("__fspath__")?;
    path.cast::<PyString>().ok().map(|text| utf8(name, text).map(str::to_owned)).transpose()
}

pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "object".into())
}

/// `Settings` from a Python object that is one (or a subclass).
pub fn settings_of(obj: &Bound<'_, PyAny>) -> PyResult<Settings> {
    obj.cast::<PySettings>().map(|s| s.get().0.clone()).map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(format!("expected lmcache_resp Settings, not {}", type_name(obj)))
    })
}
