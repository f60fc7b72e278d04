// The other side of bench/zoo/run: times one model through ONNX Runtime's CPU execution provider
// (the onnxruntime-node package that bench/zoo/run installs), as bench/zoo_bench.cpp times it
// through deepwire.
//
// Usage: node ort_run.js ORT_PACKAGE_DIR MODEL.onnx INPUT.npy THREADS RUNS WARMUP [OUT.npy]
// Prints one line of JSON: {"create_ms": ..., "runs_ms": [...]}.
"use strict";
const fs = require("fs");

function readNpy(path) {
  const buf = fs.readFileSync(path);
  const headerLen = buf.readUInt16LE(8);
  const header = buf.toString("latin1", 10, 10 + headerLen);
  if (!header.includes("'<f4'")) throw new Error(path + ": only float32 .npy inputs");
  const shape = header.match(/\(([^)]*)\)/)[1].split(",").filter((s) => s.trim() !== "")
                    .map((s) => parseInt(s, 10));
  const start = 10 + headerLen;
  const data = new Float32Array(buf.buffer.slice(buf.byteOffset + start, buf.byteOffset + buf.length));
  return { shape, data };
}

function writeNpy(path, shape, data) {
  let header = `{'descr': '<f4', 'fortran_order': False, 'shape': (${shape.join(", ")}${shape.length === 1 ? "," : ""}), }`;
  while ((10 + header.length + 1) % 64 !== 0) header += " ";
  header += "\n";
  const head = Buffer.alloc(10);
  head.write("\x93NUMPY", 0, "latin1");
  head[6] = 1;
  head[7] = 0;
  head.writeUInt16LE(header.length, 8);
  fs.writeFileSync(path, Buffer.concat([head, Buffer.from(header, "latin1"),
                                        Buffer.from(new Float32Array(data).buffer)]));
}

async function main() {
  const [pkg, model, input, threads, runs, warmup, out] = process.argv.slice(2);
  const ort = require(pkg);
  const x = readNpy(input);
  const t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ["cpu"],
    intraOpNumThreads: parseInt(threads, 10),
    interOpNumThreads: 1,
    graphOptimizationLevel: "all",
  });
  const createMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const feeds = { [session.inputNames[0]]: new ort.Tensor("float32", x.data, x.shape) };
  const times = [];
  const total = parseInt(runs, 10) + parseInt(warmup, 10);
  for (let r = 0; r < total; ++r) {
    const t = process.hrtime.bigint();
    const y = await session.run(feeds);
    const ms = Number(process.hrtime.bigint() - t) / 1e6;
    if (r >= parseInt(warmup, 10)) times.push(ms);
    if (r === 0 && out) {
      const first = y[session.outputNames[0]];
      writeNpy(out, first.dims, first.data);
    }
  }
  console.log(JSON.stringify({ create_ms: createMs, runs_ms: times }));
}

main().catch((e) => {
  console.error("ort_run: " + e.message);
  process.exit(1);
});
