//! The C ABI of `libhelm_c.so` (helm-c-sdk 0.2, see `render/tests/HELM_C_ABI.md`), loaded at
//! run time with `libloading`, with safe wrappers: library-owned strings are copied and freed
//! with `helm_free_string`, errors come back as `(code, message)`, chart and config handles
//! are freed on drop.
//!
//! Only the render worker process loads it: the library carries a Go runtime, which has no
//! place in a replica.

use std::ffi::{CStr, CString, c_char};
use std::path::Path;

type StrOut = *mut *mut c_char;
type Handle = u64;

/// A failed call: the library's status code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CallError {
    pub code: i32,
    pub message: String,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The functions Starling calls, resolved once.
struct Functions {
    c_version: unsafe extern "C" fn() -> *mut c_char,
    sdk_version: unsafe extern "C" fn() -> *mut c_char,
    free_string: unsafe extern "C" fn(*mut c_char),
    chart_load: unsafe extern "C" fn(*const c_char, *mut Handle, StrOut) -> i32,
    chart_free: unsafe extern "C" fn(Handle, StrOut) -> i32,
    render: unsafe extern "C" fn(Handle, *const c_char, *const c_char, StrOut, StrOut) -> i32,
    chart_crds: unsafe extern "C" fn(Handle, StrOut, StrOut) -> i32,
    values_from_yaml: unsafe extern "C" fn(*const c_char, StrOut, StrOut) -> i32,
    config_new: unsafe extern "C" fn(*const c_char, *mut Handle, StrOut) -> i32,
    config_free: unsafe extern "C" fn(Handle, StrOut) -> i32,
    #[allow(clippy::type_complexity)]
    install: unsafe extern "C" fn(
        Handle,
        Handle,
        Handle,
        *const c_char,
        *const c_char,
        *const c_char,
        *const c_char,
        StrOut,
        StrOut,
    ) -> i32,
}

/// The loaded library. It is never unloaded: a Go runtime cannot be.
pub(crate) struct HelmLibrary {
    functions: Functions,
    _library: libloading::Library,
}

fn c_string(text: &str, what: &str) -> Result<CString, CallError> {
    CString::new(text).map_err(|_| CallError {
        code: -2,
        message: format!("{what} holds a NUL byte"),
    })
}

impl HelmLibrary {
    /// Loads the library at `path` and resolves every function Starling calls.
    pub(crate) fn load(path: &Path) -> Result<HelmLibrary, String> {
        // SAFETY: loading runs the library's initialisers (the Go runtime's); it is the
        // library helm-python-sdk loads the same way, and only the worker process loads it.
        let library = unsafe { libloading::Library::new(path) }
            .map_err(|error| format!("cannot load {}: {error}", path.display()))?;
        macro_rules! symbol {
            ($name:literal) => {
                // SAFETY: the type is the one helm_c.h declares for this symbol.
                *unsafe { library.get(concat!($name, "\0").as_bytes()) }.map_err(|error| {
                    format!(
                        "{} is not helm-c-sdk 0.2 (missing {}): {error}",
                        path.display(),
                        $name
                    )
                })?
            };
        }
        let functions = Functions {
            c_version: symbol!("helm_c_version"),
            sdk_version: symbol!("helm_sdk_version"),
            free_string: symbol!("helm_free_string"),
            chart_load: symbol!("helm_chart_load"),
            chart_free: symbol!("helm_chart_free"),
            render: symbol!("helm_render"),
            chart_crds: symbol!("helm_chart_crds"),
            values_from_yaml: symbol!("helm_values_from_yaml"),
            config_new: symbol!("helm_config_new"),
            config_free: symbol!("helm_config_free"),
            install: symbol!("helm_install"),
        };
        Ok(HelmLibrary {
            functions,
            _library: library,
        })
    }

    /// Copies a library-owned string and frees it.
    fn take(&self, pointer: *mut c_char) -> Option<String> {
        if pointer.is_null() {
            return None;
        }
        // SAFETY: a non-null pointer the library returned is a NUL-terminated string it
        // allocated; it is freed exactly once, here, after the copy.
        let text = unsafe { CStr::from_ptr(pointer) }
            .to_string_lossy()
            .into_owned();
        unsafe { (self.functions.free_string)(pointer) };
        Some(text)
    }

    /// Turns a status and its error out-string into a result.
    fn status(&self, code: i32, error: *mut c_char) -> Result<(), CallError> {
        let message = self.take(error);
        if code == 0 {
            return Ok(());
        }
        Err(CallError {
            code,
            message: message.unwrap_or_else(|| format!("helm error code {code}")),
        })
    }

    /// `helm_c_version()` and `helm_sdk_version()`.
    pub(crate) fn versions(&self) -> (String, String) {
        // SAFETY: no arguments; the results are library-owned strings.
        let c = self.take(unsafe { (self.functions.c_version)() });
        let sdk = self.take(unsafe { (self.functions.sdk_version)() });
        (c.unwrap_or_default(), sdk.unwrap_or_default())
    }

    /// A chart directory or archive, loaded.
    pub(crate) fn load_chart(&self, path: &Path) -> Result<Chart<'_>, CallError> {
        let path = c_string(&path.to_string_lossy(), "the chart path")?;
        let mut handle: Handle = 0;
        let mut error = std::ptr::null_mut();
        // SAFETY: valid C string, out-pointers to locals.
        let code = unsafe { (self.functions.chart_load)(path.as_ptr(), &mut handle, &mut error) };
        self.status(code, error)?;
        Ok(Chart {
            library: self,
            handle,
        })
    }

    /// A YAML values document parsed as Helm (and Kubernetes) parse YAML, as JSON.
    pub(crate) fn values_from_yaml(&self, yaml: &str) -> Result<String, CallError> {
        let yaml = c_string(yaml, "the values document")?;
        let mut out = std::ptr::null_mut();
        let mut error = std::ptr::null_mut();
        // SAFETY: valid C string, out-pointers to locals.
        let code =
            unsafe { (self.functions.values_from_yaml)(yaml.as_ptr(), &mut out, &mut error) };
        let out = self.take(out);
        self.status(code, error)?;
        Ok(out.unwrap_or_else(|| "{}".to_owned()))
    }

    /// An action configuration (`helm_config_new`) from its options JSON.
    pub(crate) fn config(&self, options_json: &str) -> Result<Config<'_>, CallError> {
        let options = c_string(options_json, "the config options")?;
        let mut handle: Handle = 0;
        let mut error = std::ptr::null_mut();
        // SAFETY: valid C string, out-pointers to locals.
        let code =
            unsafe { (self.functions.config_new)(options.as_ptr(), &mut handle, &mut error) };
        self.status(code, error)?;
        Ok(Config {
            library: self,
            handle,
        })
    }
}

/// A loaded chart; freed on drop.
pub(crate) struct Chart<'a> {
    library: &'a HelmLibrary,
    handle: Handle,
}

impl Chart<'_> {
    /// `helm_render`: `{template path: rendered text}` as JSON.
    pub(crate) fn render(
        &self,
        values_json: &str,
        options_json: &str,
    ) -> Result<String, CallError> {
        let values = c_string(values_json, "the values")?;
        let options = c_string(options_json, "the render options")?;
        let mut out = std::ptr::null_mut();
        let mut error = std::ptr::null_mut();
        let functions = &self.library.functions;
        // SAFETY: a live chart handle, valid C strings, out-pointers to locals.
        let code = unsafe {
            (functions.render)(
                self.handle,
                values.as_ptr(),
                options.as_ptr(),
                &mut out,
                &mut error,
            )
        };
        let out = self.library.take(out);
        self.library.status(code, error)?;
        Ok(out.unwrap_or_else(|| "{}".to_owned()))
    }

    /// `helm_chart_crds`: `[{"name","filename","data"}]` as JSON.
    pub(crate) fn crds(&self) -> Result<String, CallError> {
        let mut out = std::ptr::null_mut();
        let mut error = std::ptr::null_mut();
        // SAFETY: a live chart handle, out-pointers to locals.
        let code =
            unsafe { (self.library.functions.chart_crds)(self.handle, &mut out, &mut error) };
        let out = self.library.take(out);
        self.library.status(code, error)?;
        Ok(out.unwrap_or_else(|| "[]".to_owned()))
    }

    /// `helm_install` as `helm template` does it (a client-side dry run against fake clients
    /// and memory storage): the pre-flight checks `helm_render` lacks.
    pub(crate) fn dry_run_install(
        &self,
        config: &Config<'_>,
        release: &str,
        values_json: &str,
        options_json: &str,
    ) -> Result<(), CallError> {
        let release = c_string(release, "the release name")?;
        let values = c_string(values_json, "the values")?;
        let options = c_string(options_json, "the install options")?;
        let mut out = std::ptr::null_mut();
        let mut error = std::ptr::null_mut();
        // SAFETY: live handles (context 0 is the library's default), valid C strings or NULL
        // for the chart reference, out-pointers to locals.
        let code = unsafe {
            (self.library.functions.install)(
                config.handle,
                0,
                self.handle,
                std::ptr::null(),
                release.as_ptr(),
                values.as_ptr(),
                options.as_ptr(),
                &mut out,
                &mut error,
            )
        };
        drop(self.library.take(out));
        self.library.status(code, error)
    }
}

impl Drop for Chart<'_> {
    fn drop(&mut self) {
        let mut error = std::ptr::null_mut();
        // SAFETY: the handle is this chart's, freed once.
        let code = unsafe { (self.library.functions.chart_free)(self.handle, &mut error) };
        let _ = self.library.status(code, error);
    }
}

/// An action configuration; freed on drop.
pub(crate) struct Config<'a> {
    library: &'a HelmLibrary,
    handle: Handle,
}

impl Drop for Config<'_> {
    fn drop(&mut self) {
        let mut error = std::ptr::null_mut();
        // SAFETY: the handle is this config's, freed once.
        let code = unsafe { (self.library.functions.config_free)(self.handle, &mut error) };
        let _ = self.library.status(code, error);
    }
}
