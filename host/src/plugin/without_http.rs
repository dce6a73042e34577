//! Plugins granted no HTTP: linked without the host's `wasi:http`.
//!
//! Invariant: a plugin whose policy has no `http_allow` never reaches the host's `wasi:http`
//! code; a component that imports it still links, against functions that refuse every call
//! with [`HttpNotGranted`], which names the function.

use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, InstancePre, ResourceType};

use super::runtime::Runtime;
use super::sandbox::CallState;

/// The instance-pre of a plugin that is granted no HTTP: linked without the host's
/// `wasi:http`; the component's `wasi:http` imports, if it has any, are functions that refuse
/// every call, so it loads and runs everything else.
pub(super) fn link_without_http(
    runtime: &Runtime,
    component: &Component,
) -> wasmtime::Result<InstancePre<CallState>> {
    let engine = runtime.engine();
    let imports: Vec<(String, ComponentItem)> = component
        .component_type()
        .imports(engine)
        .map(|(name, item)| (name.to_owned(), item.ty))
        .collect();
    if !imports
        .iter()
        .any(|(name, _)| name.starts_with(HTTP_IMPORTS))
    {
        return runtime.inner.linker_without_http.instantiate_pre(component);
    }
    // Resources that `wasi:http` only names (`use`s) from an interface the host links, such
    // as `wasi:io`'s streams: those keep their own definition.
    let provided: Vec<ResourceType> = imports
        .iter()
        .filter(|(name, _)| !name.starts_with(HTTP_IMPORTS))
        .filter_map(|(_, item)| match item {
            ComponentItem::ComponentInstance(instance) => Some(instance),
            _ => None,
        })
        .flat_map(|instance| instance.exports(engine))
        .filter_map(|(_, item)| match item.ty {
            ComponentItem::Resource(resource) => Some(resource),
            _ => None,
        })
        .collect();
    let mut linker = runtime.inner.linker_without_http.clone();
    for (name, item) in &imports {
        let ComponentItem::ComponentInstance(instance) = item else {
            continue;
        };
        if !name.starts_with(HTTP_IMPORTS) {
            continue;
        }
        let mut refused = linker.instance(name)?;
        for (export, item) in instance.exports(engine) {
            match item.ty {
                ComponentItem::ComponentFunc(_) => {
                    let function = format!("{name}#{export}");
                    refused.func_new(export, move |_, _, _, _| {
                        Err(wasmtime::Error::new(HttpNotGranted(function.clone())))
                    })?;
                }
                ComponentItem::Resource(resource) if !provided.contains(&resource) => {
                    refused.resource(export, ResourceType::host::<HttpNotGranted>(), |_, _| {
                        Ok(())
                    })?;
                }
                _ => {}
            }
        }
    }
    linker.instantiate_pre(component)
}

const HTTP_IMPORTS: &str = "wasi:http/";

/// A call into `wasi:http` by a plugin whose policy grants no HTTP: the function it called.
#[derive(Debug, thiserror::Error)]
#[error("{0} is not linked: this plugin is granted no HTTP")]
struct HttpNotGranted(String);

/// The `wasi:http` function a call was refused in because it is not linked.
pub(super) fn denied_import(error: &wasmtime::Error) -> Option<String> {
    error
        .chain()
        .find_map(|cause| cause.downcast_ref::<HttpNotGranted>())
        .map(|denied| denied.0.clone())
}
