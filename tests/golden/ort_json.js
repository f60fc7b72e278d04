// node ortjson.js PKG MODEL IN.json OUT.json [THREADS] : inputs {name: {type, dims, data}} -> outputs same
// (non-finite numbers as the strings "Infinity", "-Infinity" and "NaN", which JSON cannot hold)
const fs = require("fs");
const ort = require(process.argv[2]);
(async () => {
  // An optional 6th argument sets the intra-op threads (kernels whose results depend on them).
  const options = {graphOptimizationLevel: "disabled"};
  if (process.argv[6]) options.intraOpNumThreads = Number(process.argv[6]);
  const s = await ort.InferenceSession.create(process.argv[3], options);
  const inp = JSON.parse(fs.readFileSync(process.argv[4]));
  const feeds = {};
  const ctor = {
    float32: Float32Array,
    float64: Float64Array,
    int64: BigInt64Array,
    int32: Int32Array,
    int16: Int16Array,
    uint16: Uint16Array,
    uint32: Uint32Array,
    uint8: Uint8Array,
    int8: Int8Array,
    bool: Uint8Array
  };
  for (const [k, v] of Object.entries(inp)) {
    const data = v.type === 'int64' ? BigInt64Array.from(v.data.map(BigInt)) :
        v.type === 'uint64'         ? BigUint64Array.from(v.data.map(BigInt)) :
        v.type === 'string'         ? v.data :
                                      ctor[v.type].from(v.data);
    feeds[k] = new ort.Tensor(v.type, data, v.dims);
  }
  const out = await s.run(feeds);
  const res = {};
  for (const [k, t] of Object.entries(out))
    res[k] = {
      type: t.type,
      dims: t.dims,
      data: Array.from(
          t.data,
          x => typeof x === 'bigint'                       ? Number(x) :
              typeof x === 'number' && !Number.isFinite(x) ? String(x) :
                                                             x)
    };
  fs.writeFileSync(process.argv[5], JSON.stringify(res));
})().catch(e => { console.error(String(e)); process.exit(1); });
