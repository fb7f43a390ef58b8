// The WebGPU features coco asks for itself, because wgpu 30's web backend can't name them:
// its request_device maps 16 wgpu features to GPUFeatureName strings, and `subgroups` is not
// among them (wgpu issue 10146). WGSL reaches the browser as text (wgpu's web backend passes
// it through unparsed), so once the device has the feature, `enable subgroups;` kernels
// compile in the browser like any other.
//
// How: GPUAdapter.prototype.requestDevice is wrapped once. A call whose descriptor label coco
// registered with askForSubgroups() gets 'subgroups' added to its requiredFeatures when the
// adapter offers it; every other caller (another library on the page) is passed through
// untouched. With askForSubgroups(label, true) (a link's gemm=matrix) the same call asks for
// Chromium's experimental subgroup matrices too, where they hold the int8 product coco's
// prefill GEMM uses. What the browser granted is recorded under
// the label for granted() to read.
// wgpu sets the descriptor's label from its own DeviceDescriptor, which is how the two meet.

const wanted = new Map(); // label -> whether to ask for subgroup matrices too
const grants = new Map();
let wrapped = false;

function wrapRequestDevice() {
  if (wrapped || typeof GPUAdapter === "undefined") return;
  wrapped = true;
  const original = GPUAdapter.prototype.requestDevice;
  GPUAdapter.prototype.requestDevice = async function (descriptor) {
    const label = descriptor?.label;
    if (!wanted.has(label)) return original.call(this, descriptor);
    const offered = this.features.has("subgroups");
    const info = this.info ?? {};
    const configs = [...(info.subgroupMatrixConfigs ?? [])];
    const features = [...(descriptor.requiredFeatures ?? [])];
    if (offered && !features.includes("subgroups")) features.push("subgroups");
    // Chromium's experimental subgroup matrices, where the adapter offers the int8 product
    // coco's prefill GEMM multiplies (16 x 16 x 32, i8 -> i32; features.rs INT8_MATRIX).
    const matrix = "chromium-experimental-subgroup-matrix";
    const int8 = configs.some((c) => String(c.componentType) === "i8" && String(c.resultComponentType) === "i32"
      && Number(c.M) === 16 && Number(c.N) === 16 && Number(c.K) === 32);
    let device;
    if (wanted.get(label) && offered && int8 && this.features.has(matrix)) {
      // An experimental feature: if asking for it fails the device opens without it.
      try {
        device = await original.call(this, { ...descriptor, requiredFeatures: [...features, matrix] });
      } catch (e) {
        console.warn(`coco: ${matrix} requested and refused (${e}); opening without it`);
      }
    }
    device ??= await original.call(this, { ...descriptor, requiredFeatures: features });
    grants.set(label, {
      offered,
      granted: device.features.has("subgroups"),
      // WGSL's subgroup_id / num_subgroups builtins (Chromium 144+), which coco's subgroup
      // kernels use.
      subgroup_id: navigator.gpu?.wgslLanguageFeatures?.has("subgroup_id") ?? false,
      // WGSL's dot4I8Packed / pack4xI8, which the int8 decode matvec uses.
      packed_4x8: navigator.gpu?.wgslLanguageFeatures?.has("packed_4x8_integer_dot_product") ?? false,
      min_size: info.subgroupMinSize ?? 0,
      max_size: info.subgroupMaxSize ?? 0,
      // Chromium's experimental subgroup matrices (tensor cores through WebGPU): the offer,
      // and whether coco's device got them (features.rs BrowserGrant::int8_matrix).
      matrix_offered: this.features.has(matrix),
      matrix_granted: device.features.has(matrix),
      matrix_configs: configs.map((c) => ({
        component: String(c.componentType),
        result: String(c.resultComponentType),
        m: Number(c.M),
        n: Number(c.N),
        k: Number(c.K),
      })),
    });
    return device;
  };
}

/** Asks for `subgroups` on the next requestDevice whose descriptor is labelled `label`, and
 * with `matrices` for `chromium-experimental-subgroup-matrix` too. */
export function askForSubgroups(label, matrices) {
  wrapRequestDevice();
  wanted.set(label, Boolean(matrices));
}

/** What the browser granted the device labelled `label`, or undefined if it never asked. */
export function granted(label) {
  wanted.delete(label);
  const grant = grants.get(label);
  grants.delete(label);
  return grant;
}
