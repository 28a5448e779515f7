// servesim.js: the glue between the page and the simulator compiled to
// WebAssembly (web/src/abi.rs). No wasm-bindgen: a request (JSON text) is
// copied into the module's memory, an export runs, the answer is read back.
//
//   const sim = await Servesim.load();           // fetch on http(s), embedded copy on file://
//   sim.sweep({concurrencies: [1, 16, 64]})      // -> {text, value}: `servesim sweep --json`
//   sim.simulate({sets: [...], timeseries: true}) // -> {text, value, caveatNotes, timeseries}
//   sim.explain({concurrency: 64})               // -> {text, value}: `servesim explain --json`
//   sim.resolve({scenario: "..."})               // -> what the controls show
//   sim.translate({to: "sglang"})                // -> the scenario on the other engine
//
// A failed call throws a ServesimError whose message is what the binary
// prints after "error: " (the field is named).
(function (global) {
  'use strict';

  class ServesimError extends Error {
    constructor(message) {
      super(message);
      this.name = 'ServesimError';
    }
  }

  // The exports that take no request.
  const NO_REQUEST = ['scenarios', 'knobs', 'last_timeseries', 'last_caveat_notes'];

  const encoder = new TextEncoder();
  const decoder = new TextDecoder();

  function base64ToBytes(b64) {
    const bin = atob(b64);
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }

  function loadScript(src) {
    return new Promise((resolve, reject) => {
      const s = document.createElement('script');
      s.src = src;
      s.onload = resolve;
      s.onerror = () => reject(new Error('cannot load ' + src));
      document.head.appendChild(s);
    });
  }

  class Servesim {
    constructor(module) {
      this.module = module;
      this.instantiate();
    }

    instantiate() {
      this.instance = new WebAssembly.Instance(this.module, {});
      this.x = this.instance.exports;
    }

    // The module's bytes: fetched next to the page over http(s); from the
    // embedded base64 copy (servesim_wasm.js) on file://, where browsers
    // refuse fetch.
    static async bytes(base) {
      base = base || '';
      if (typeof location !== 'undefined' && /^https?:$/.test(location.protocol)) {
        try {
          const r = await fetch(base + 'servesim.wasm');
          if (r.ok) {
            Servesim.loadedVia = 'fetch';
            return new Uint8Array(await r.arrayBuffer());
          }
        } catch (e) {
          /* fall back to the embedded copy */
        }
      }
      if (!global.SERVESIM_WASM_BASE64) await loadScript(base + 'servesim_wasm.js');
      Servesim.loadedVia = 'embedded';
      return base64ToBytes(global.SERVESIM_WASM_BASE64);
    }

    static async load(base) {
      const module = await WebAssembly.compile(await Servesim.bytes(base));
      return new Servesim(module);
    }

    output() {
      const p = this.x.output_ptr();
      const n = this.x.output_len();
      return decoder.decode(new Uint8Array(this.x.memory.buffer, p, n));
    }

    // Calls an export with a request; returns its output text or throws.
    call(name, request) {
      const bytes = encoder.encode(typeof request === 'string' ? request : JSON.stringify(request || {}));
      let code, out;
      try {
        if (NO_REQUEST.includes(name)) {
          code = this.x[name]();
        } else {
          const p = this.x.alloc(bytes.length);
          new Uint8Array(this.x.memory.buffer, p, bytes.length).set(bytes);
          code = this.x[name](p, bytes.length);
          out = this.output();
          this.x.dealloc(p, bytes.length);
        }
        if (out === undefined) out = this.output();
      } catch (e) {
        // A trap (a panic in the simulator) leaves the instance unusable: start a fresh one.
        this.instantiate();
        throw new ServesimError('internal error in the simulator: ' + e.message);
      }
      if (code !== 0) throw new ServesimError(out);
      return out;
    }

    scenarios() {
      return JSON.parse(this.call('scenarios'));
    }

    // The knobs both engines have and how their meanings differ (sim::config::KNOBS).
    knobs() {
      return JSON.parse(this.call('knobs'));
    }

    resolve(req) {
      return JSON.parse(this.call('resolve', req));
    }

    simulate(req) {
      const text = this.call('simulate', req);
      // caveatNotes[i]: the sentence the binary prints under the report's caveat i, or null.
      const r = { text, value: JSON.parse(text), caveatNotes: JSON.parse(this.call('last_caveat_notes')) };
      if (req && req.timeseries) r.timeseries = JSON.parse(this.call('last_timeseries'));
      return r;
    }

    sweep(req) {
      const text = this.call('sweep', req);
      return { text, value: JSON.parse(text) };
    }

    translate(req) {
      return JSON.parse(this.call('translate', req));
    }

    // {alignment, knobs_moved, workloads_differ, setup_differs, warning} of
    // {scenarios: [req, req]}: what `servesim sweep` prints beside scenarios side by side.
    alignment(req) {
      return JSON.parse(this.call('alignment', req));
    }

    explain(req) {
      const text = this.call('explain', req);
      return { text, value: JSON.parse(text) };
    }
  }

  global.Servesim = Servesim;
  global.ServesimError = ServesimError;
})(typeof window !== 'undefined' ? window : globalThis);
