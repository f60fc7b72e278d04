// Trainer: the training loop around the gradient graph. Weights, running statistics, gradients
// and optimizer state live here as float buffers; each step feeds them to the gradient-graph
// session as inputs (aliased, not copied) and takes back losses, gradients and new statistics.
#include "engine/training/trainer_impl.h"

namespace dw::engine::training {

double StepResult::totalLoss() const {
  double s = regularization;
  for (const auto& [k, v] : losses) s += v;
  return s;
}

Status Trainer::Impl::init(const TrainOptions& o, onnx::ModelProto fwd) {
  opt = o;
  forward = std::move(fwd);
  auto m = readTrainingMeta(forward);
  if (!m) return m.status();
  meta = std::move(m.value());
  for (const auto& mi : meta.metrics) metricNames.push_back(mi.name);

  std::vector<std::string> losses = opt.losses.empty() ? meta.losses : opt.losses;
  for (const auto& l : losses)
    if (std::find(meta.losses.begin(), meta.losses.end(), l) == meta.losses.end())
      return Status::error("loss '" + l + "' is not a loss output of the model");

  // Which initializers train: float tensors that are not Constant and not BN running stats.
  std::set<std::string> bnStats;
  for (const auto& n : forward.graph().node())
    if (n.op_type() == "BatchNormalization" && (n.domain().empty() || n.domain() == "ai.onnx"))
      for (int i = 3; i < std::min(5, n.input_size()); ++i) bnStats.insert(n.input(i));
  const auto initInfo = readInitInfo(forward);
  std::set<std::string> initNames;
  GradientGraphOptions go;
  go.losses = losses;
  for (const auto& init : forward.graph().initializer()) {
    initNames.insert(init.name());
    if (bnStats.count(init.name())) continue;
    if (init.data_type() != onnx::TensorProto::FLOAT) continue;
    InitInfo info;
    if (auto it = initInfo.find(init.name()); it != initInfo.end()) info = it->second;
    if (info.status == "Constant") continue;
    ParamEntry p;
    p.name = init.name();
    p.frozen = info.status == "Frozen";
    p.reg = info.reg;
    params.push_back(std::move(p));
    trainableNames.push_back(init.name());
    go.trainable.push_back(init.name());
    auto t = tensorFromProto(init);
    if (!t) return t.status().withContext("initializer '" + init.name() + "'");
    weights[init.name()] = std::move(t.value());
  }
  if (params.empty())
    return Status::error("the model has no Trainable or Frozen float initializer to train");
  for (const auto& in : forward.graph().input()) {
    if (initNames.count(in.name())) continue;
    dataInputs.push_back(in.name());
    const auto& shape = in.type().tensor_type().shape();
    if (!fixedBatch && shape.dim_size() > 0 && shape.dim(0).has_dim_value() &&
        shape.dim(0).dim_value() > 0) {
      fixedBatch = shape.dim(0).dim_value();
      fixedInput = in.name();
    }
  }

  auto lda = ldaCoeffFromModel(forward);
  if (!lda) return lda.status();
  go.ldaCoeff = std::move(lda.value());
  go.training = true;
  for (const auto& mi : meta.metrics) go.keepOutputs.push_back(mi.output);
  auto g = buildGradientGraph(forward, go);
  if (!g) return g.status();
  gg = std::move(g.value());
  findLabelChecks();
  stats = gg.stateUpdates;
  for (const auto& init : forward.graph().initializer()) {
    for (const auto& [stat, out] : stats) {
      if (init.name() != stat) continue;
      auto t = tensorFromProto(init);
      if (!t) return t.status().withContext("initializer '" + init.name() + "'");
      weights[stat] = std::move(t.value());
    }
  }
  for (const auto& [stat, out] : stats)
    if (!weights.count(stat))
      return Status::error("running statistic '" + stat + "' is not an initializer of the model");

  SessionOptions so;
  so.backend.accelerator = opt.accelerator;
  so.backend.threads = opt.threads;
  so.backend.precision = opt.precision;
  so.recordRuns = opt.recordRuns;
  SessionOptions tso = so;
  // Synchronized BatchNormalization sums its statistics between the kernel's passes, which the
  // fused training chains do not separate.
  tso.trainingChains = !opt.syncBatchNorm;
  for (const auto& g : gg.gradOutputs) tso.deviceOutputs.insert(g);
  for (const auto& [stat, out] : stats) tso.deviceOutputs.insert(out);
  auto ts = InferenceSession::create(gg.model, tso);
  if (!ts) return ts.status().withContext("training graph");
  trainSession = std::move(ts.value());
  notice = trainSession->notice();

  // The eval model: the forward model with trainables and statistics as inputs, so it always
  // reads the current values without copying them into the session.
  onnx::ModelProto evalModel = forward;
  auto* graph = evalModel.mutable_graph();
  std::vector<onnx::TensorProto> keep;
  for (const auto& init : graph->initializer()) {
    if (!weights.count(init.name())) {
      keep.push_back(init);
      continue;
    }
    bool listed = false;
    for (const auto& in : graph->input()) listed |= in.name() == init.name();
    if (listed) continue;
    auto* vi = graph->add_input();
    vi->set_name(init.name());
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(init.data_type());
    for (int64_t d : init.dims()) tt->mutable_shape()->add_dim()->set_dim_value(d);
  }
  graph->clear_initializer();
  for (auto& k : keep) *graph->add_initializer() = std::move(k);
  auto es = InferenceSession::create(evalModel, so);
  if (!es) return es.status().withContext("evaluation graph");
  evalSession = std::move(es.value());
  // The finalize of a metric is a few element-wise ops on its sums: one thread, always the CPU.
  SessionOptions fso;
  fso.backend.accelerator = "cpu";
  fso.backend.threads = 1;
  for (const auto& mi : meta.metrics) {
    auto fm = metricFinalizeModel(forward, mi.name);
    if (!fm) return fm.status().withContext("metric '" + mi.name + "'");
    auto fin = InferenceSession::create(*fm, fso);
    if (!fin) return fin.status().withContext("finalize of metric '" + mi.name + "'");
    finalizers.push_back(std::move(fin.value()));
  }

  auto optim = Optimizer::create(opt.optimizer);
  if (!optim) return optim.status();
  optimizer = std::move(optim.value());
  baseLr = opt.optimizer.lr;
  for (const auto& p : params) grads[p.name] = Tensor(DType::kFloat, weights[p.name].shape());
  dev = cuda::trainingOps(trainSession->backend());
  devStale = dev != nullptr;
  return dev ? syncDevice() : Status();
}

Status Trainer::Impl::syncDevice() {
  if (!dev || !devStale) return Status();
  Backend& be = trainSession->backend();
  devWeights.clear();
  devGrads.clear();
  devState.clear();  // re-uploaded from the host state on first use (deviceState)
  for (const auto& [name, t] : weights) {
    auto d = be.toDevice(t);
    if (!d) return d.status().withContext("weight '" + name + "'");
    devWeights[name] = std::move(*d);
  }
  if (counters.accumulated > 0)
    for (const auto& [name, g] : grads) {
      auto d = be.toDevice(g);
      if (!d) return d.status();
      devGrads[name] = std::move(*d);
    }
  devStale = false;
  hostStale = false;
  return Status();
}

Status Trainer::Impl::syncHost() const {
  if (!dev || !hostStale) return Status();
  Backend& be = trainSession->backend();
  for (const auto& [name, t] : devWeights) {
    auto h = be.toHost(t);
    if (!h) return h.status();
    weights[name] = std::move(*h);
  }
  for (const auto& [name, t] : devGrads) {
    if (!t.defined()) continue;
    auto h = be.toHost(t);
    if (!h) return h.status();
    grads[name] = h->reshaped(weights.at(name).shape());
  }
  for (auto& p : params) {
    auto it = devState.find(p.name);
    if (it == devState.end()) continue;
    for (const auto& [k, t] : it->second) {
      auto h = be.toHost(t);
      if (!h) return h.status();
      p.state.buffers[k].assign(h->data<float>(), h->data<float>() + h->size());
    }
  }
  hostStale = false;
  return Status();
}

Result<Tensor*> Trainer::Impl::deviceState(ParamEntry& p, const char* name, float init) {
  auto& slot = devState[p.name][name];
  if (slot.defined()) return &slot;
  const Shape& shape = weights.at(p.name).shape();
  auto hb = p.state.buffers.find(name);
  if (hb != p.state.buffers.end() &&
      static_cast<int64_t>(hb->second.size()) == numElements(shape)) {
    auto d = trainSession->backend().toDevice(Tensor::fromVector(hb->second, shape));
    if (!d) return d.status();
    slot = std::move(*d);
  } else if (init == 0) {
    auto z = dev->zeros(shape);
    if (!z) return z.status();
    slot = std::move(*z);
  } else {
    auto d = trainSession->backend().toDevice(Tensor::fromVector(
        std::vector<float>(static_cast<size_t>(numElements(shape)), init), shape));
    if (!d) return d.status();
    slot = std::move(*d);
  }
  return &slot;
}

// The class counts come from the forward types the gradient graph carries (autodiff's
// inference); where a count is unknown, the loss kernels still refuse bad labels.
void Trainer::Impl::findLabelChecks() {
  std::map<std::string, const onnx::TypeProto*> types;
  for (const auto& v : gg.model.graph().value_info()) types[v.name()] = &v.type();
  for (const auto& v : gg.model.graph().output()) types[v.name()] = &v.type();
  for (const auto& v : gg.model.graph().input()) types[v.name()] = &v.type();
  labelChecks = labelRangesOf(forward.graph(), types, dataInputs);
}

Status Trainer::Impl::checkLabels(const std::map<std::string, Tensor>& columns,
                                  const std::string& where,
                                  const std::vector<int64_t>* origin) const {
  return checkLabelValues(labelChecks, columns, where, origin);
}

Status Trainer::Impl::checkBatch(const Batch& b) const {
  for (const auto& name : dataInputs)
    if (!b.inputs.count(name)) {
      std::string have;
      for (const auto& [k, v] : b.inputs) have += (have.empty() ? "" : ", ") + k;
      return Status::error("the batch does not feed graph input '" + name +
                           "' (it has: " + (have.empty() ? "nothing" : have) +
                           "); map a dataset file to it in the training section");
    }
  return checkLabels(b.inputs, "the batch");
}

std::map<std::string, Tensor> Trainer::Impl::feeds(const Batch& b) const {
  std::map<std::string, Tensor> in;
  for (const auto& name : dataInputs) in.emplace(name, b.inputs.at(name));
  for (const auto& [k, v] : dev ? devWeights : weights) in.emplace(k, v);
  return in;
}

// A run of `session` on batch b. On a GPU the batch may be page-locked (batchStorage), and
// then its upload is still in flight when the run has only queued work (an error part-way, or
// no output to copy down): wait for the GPU, so that the loader can refill the batch's memory
// as soon as the caller lets it go.
Result<std::map<std::string, Tensor>> Trainer::Impl::runOnBatch(InferenceSession& session,
                                                                const Batch& b) {
  auto out = session.run(feeds(b));
  if (dev) {
    const Status synced = session.backend().synchronize();
    if (out.ok() && !synced.ok()) return synced;
  }
  return out;
}

Result<StepResult> Trainer::Impl::trainStep(const Batch& b) {
  DW_RETURN_IF_ERROR(checkBatch(b));
  DW_RETURN_IF_ERROR(syncDevice());
  if (counters.accumulated == 0) {
    // Nothing is accumulated, so the last step's gradient buffers can go back to the session,
    // which reuses them for this step's gradients: no allocation in the steady state.
    for (auto& [name, g] : grads) g = Tensor();
    for (auto& [name, g] : devGrads) g = Tensor();
    gradsStale = true;
  }
  // Overlapped sums (distributed): each gradient goes into a bucket as soon as its node has
  // run, and the sums move along between the nodes that follow.
  const bool overlap = overlapSum && counters.accumulated == 0 && !dev;
  std::vector<bool> bucketed(params.size(), false);
  Status overlapStatus;
  if (overlap) {
    if (gradIndex.empty())
      for (size_t i = 0; i < params.size(); ++i) gradIndex[gg.gradOutputs[i]] = i;
    trainSession->setProgressListener([&](const auto& produced) {
      if (!overlapStatus.ok()) return;
      for (const auto& [name, t] : produced) {
        auto it = gradIndex.find(name);
        if (it == gradIndex.end() || bucketed[it->second]) continue;
        bucketed[it->second] = true;
        overlapStatus = bucketGradient(it->second, *t);
        if (!overlapStatus.ok()) return;
      }
      overlapStatus = comm->progress();
    });
  }
  RunInfo run;
  run.step = counters.trainSteps;
  run.sampleOffset = sampleOffset;
  if (distributed() && opt.syncBatchNorm) {
    run.sumAcrossProcesses = [this](double* v, int64_t n) { return comm->allreduceSum(v, n); };
    run.share = gradWeight;
  }
  trainSession->setRunInfo(run);
  auto out = runOnBatch(*trainSession, b);
  if (overlap) trainSession->setProgressListener(nullptr);
  if (!out) return out.status();
  DW_RETURN_IF_ERROR(overlapStatus);
  auto& o = out.value();
  if (overlap) {
    // Gradients no node produced (an input or a constant) join the last bucket.
    for (size_t i = 0; i < params.size(); ++i) {
      if (bucketed[i]) continue;
      auto it = o.find(gg.gradOutputs[i]);
      if (it == o.end())
        return Status::error("the training graph did not produce '" + gg.gradOutputs[i] + "'");
      DW_RETURN_IF_ERROR(bucketGradient(i, it->second));
    }
    DW_RETURN_IF_ERROR(finishBuckets());
    gradientsSummed = true;
  }
  StepResult r;
  r.samples = b.size;
  for (const auto& l : meta.losses) {
    auto it = o.find(l);
    if (it != o.end()) r.losses[l] = scalarOf(it->second);
  }
  for (const auto& mi : meta.metrics) {
    auto it = o.find(mi.output);
    if (it != o.end()) r.metrics[mi.name] = scalarOf(it->second);
  }
  r.batchMetrics = r.metrics;
  for (size_t i = 0; i < params.size() && !overlap; ++i) {
    auto it = o.find(gg.gradOutputs[i]);
    if (it == o.end())
      return Status::error("the training graph did not produce '" + gg.gradOutputs[i] + "'");
    Tensor& acc = dev ? devGrads[params[i].name] : grads[params[i].name];
    const Tensor& w = weights.at(params[i].name);
    const Tensor& g = it->second;
    if (g.size() != w.size() || g.dtype() != DType::kFloat)
      return Status::error("gradient '" + gg.gradOutputs[i] + "' has shape " +
                           shapeToString(g.shape()) + ", the weight has " +
                           shapeToString(w.shape()));
    if (counters.accumulated == 0) {
      // The first micro-batch takes the session's output buffer instead of adding into zeros.
      acc = g.reshaped(w.shape());
      if (gradWeight != 1.0) {
        float* a = acc.data<float>();
        const float f = static_cast<float>(gradWeight);
        for (int64_t k = 0; k < acc.size(); ++k) a[k] *= f;
      }
    } else if (dev) {
      DW_RETURN_IF_ERROR(dev->addInto(acc, g));
    } else {
      float* a = acc.data<float>();
      const float* s = g.data<float>();
      const float f = static_cast<float>(gradWeight);
      if (gradWeight != 1.0)
        for (int64_t k = 0; k < acc.size(); ++k) a[k] += f * s[k];
      else
        for (int64_t k = 0; k < acc.size(); ++k) a[k] += s[k];
    }
  }
  gradsStale = false;
  for (const auto& [stat, newOut] : stats) {
    auto it = o.find(newOut);
    if (it == o.end()) return Status::error("the training graph did not produce '" + newOut + "'");
    (dev ? devWeights : weights)[stat] = it->second;
  }
  if (dev) hostStale = true;
  for (const auto& p : params)
    if (p.reg.active()) {
      DW_RETURN_IF_ERROR(syncHost());
      const Tensor& w = weights.at(p.name);
      r.regularization += p.reg.penalty(w.data<float>(), w.size());
    }
  ++counters.accumulated;
  ++counters.trainSteps;
  r.lr = scheduledLr(opt.optimizer.schedule, baseLr, counters.optimizerSteps);
  return r;
}

Status Trainer::Impl::optimizerStep() {
  if (counters.accumulated == 0)
    return Status::error("no gradients to apply: run a Train Step first (Reset Grad cleared them)");
  if (dev) return deviceOptimizerStep();
  std::vector<std::pair<float*, int64_t>> gs;
  for (auto& p : params) {
    Tensor& g = grads.at(p.name);
    float* gp = g.data<float>();
    if (gradScale != 1.0) {
      const float s = static_cast<float>(gradScale);
      for (int64_t k = 0; k < g.size(); ++k) gp[k] *= s;
    }
    if (p.reg.active()) p.reg.addGradient(weights.at(p.name).data<float>(), gp, g.size());
    if (!p.frozen) gs.emplace_back(gp, g.size());
  }
  const auto& oc = opt.optimizer;
  trainSession->backend().applyThreads();
  lastGradNorm = oc.clipNorm > 0 ? clipGradNorm(gs, oc.clipNorm, oc.clipNormType)
                                 : gradNorm(gs, oc.clipNormType);
  lastLr = scheduledLr(oc.schedule, baseLr, counters.optimizerSteps);
  for (auto& p : params) {
    if (p.frozen) continue;
    Tensor& w = weights.at(p.name);
    optimizer->update(w.data<float>(), grads.at(p.name).data<float>(), w.size(), lastLr, p.state);
  }
  ++counters.optimizerSteps;
  return Status();
}

// The same step as optimizerStep's, on the device: every rule runs there (Adagrad and RMSprop
// through ops/optimizer.h, which the host uses too); regularization's gradient takes the values
// to the host and back.
Status Trainer::Impl::deviceOptimizerStep() {
  DW_RETURN_IF_ERROR(syncDevice());
  Backend& be = trainSession->backend();
  const auto runLock = be.lockRun();  // not inside another session's recording
  be.applyThreads();
  const auto& oc = opt.optimizer;
  std::vector<Tensor*> gs;
  for (auto& p : params) {
    Tensor& g = devGrads.at(p.name);
    if (gradScale != 1.0) DW_RETURN_IF_ERROR(dev->scale(g, static_cast<float>(gradScale)));
    if (p.reg.active()) {
      Tensor& w = devWeights.at(p.name);
      auto hw = be.toHost(w);
      auto hg = be.toHost(g);
      if (!hw || !hg) return !hw ? hw.status() : hg.status();
      Tensor hgc = hg->clone();
      p.reg.addGradient(hw->data<float>(), hgc.data<float>(), hgc.size());
      auto dg = be.toDevice(hgc);
      if (!dg) return dg.status();
      g = std::move(*dg);
    }
    if (!p.frozen) gs.push_back(&g);
  }
  auto norm = dev->norm(gs, oc.clipNormType);
  if (!norm) return norm.status();
  lastGradNorm = *norm;
  // The cpu's test and factor (clipGradNorm), so both paths clip the same steps.
  const double coef = oc.clipNorm / (*norm + 1e-6);
  if (oc.clipNorm > 0 && coef < 1)
    for (Tensor* g : gs) DW_RETURN_IF_ERROR(dev->scale(*g, static_cast<float>(coef)));
  lastLr = scheduledLr(oc.schedule, baseLr, counters.optimizerSteps);
  // Weights go in one multi-tensor update per rule and scalars: the scalars differ only where a
  // weight's step count does (frozen for a while, or a checkpoint says so) or, for SGD, where its
  // momentum buffer is new.
  using Update = cuda::TrainingOps::Update;
  std::map<int64_t, std::vector<Update>> byStep;
  for (auto& p : params) {
    if (p.frozen) continue;
    Update u{&devWeights.at(p.name), &devGrads.at(p.name), {nullptr, nullptr, nullptr}};
    // The state tensors each rule keeps, in Update::state's order; empty names are not kept.
    std::vector<const char*> names;
    float init = 0.f;
    if (oc.type == "adam" || oc.type == "adamw") {
      names = {"m", "v", oc.amsgrad ? "vmax" : ""};
    } else if (oc.type == "sgd") {
      names = {oc.momentum != 0 ? "momentum" : ""};
    } else if (oc.type == "adagrad") {
      names = {"sum"};
      init = static_cast<float>(oc.initialAccumulator);  // as on the host
    } else if (oc.type == "rmsprop") {
      names = {"square_avg", oc.centered ? "grad_avg" : "", oc.momentum > 0 ? "momentum" : ""};
    } else {
      return Status::error("optimizer '" + oc.type + "' has no update on accelerator cuda");
    }
    // The step this update makes; for SGD, 0 where the momentum buffer is new (it starts as the
    // gradient), else 1.
    int64_t key = p.state.step + 1;
    if (oc.type == "sgd")
      key = oc.momentum != 0 && !devState[p.name].count("momentum") &&
                    !p.state.buffers.count("momentum")
                ? 0
                : 1;
    for (size_t k = 0; k < names.size(); ++k) {
      if (!*names[k]) continue;
      auto t = deviceState(p, names[k], init);
      if (!t) return t.status();
      u.state[k] = *t;
    }
    ++p.state.step;
    byStep[key].push_back(u);
  }
  for (const auto& [step, ts] : byStep) {
    if (oc.type == "adam" || oc.type == "adamw")
      DW_RETURN_IF_ERROR(dev->adam(adamScalars(oc, oc.type == "adamw", lastLr, step), ts));
    else if (oc.type == "sgd")
      DW_RETURN_IF_ERROR(dev->sgd({static_cast<float>(lastLr), static_cast<float>(oc.momentum),
                                   static_cast<float>(oc.dampening),
                                   static_cast<float>(oc.weightDecay), oc.nesterov, step == 0},
                                  ts));
    else if (oc.type == "adagrad")
      DW_RETURN_IF_ERROR(dev->adagrad(adagradScalars(oc, lastLr, step), ts));
    else
      DW_RETURN_IF_ERROR(dev->rmsprop(rmspropScalars(oc, lastLr), ts));
  }
  ++counters.optimizerSteps;
  hostStale = true;
  return Status();
}

void Trainer::Impl::resetGrad() {
  // The next trainStep takes the session's gradient buffers as they are, so zeroing is only
  // needed if someone looks at the gradients before that (gradients()).
  counters.accumulated = 0;
  gradsStale = true;
}

const std::map<std::string, Tensor>& Trainer::Impl::gradients() {
  (void)syncHost();  // a failed copy leaves the last host values, which the caller then sees
  if (gradsStale && counters.accumulated == 0) {
    for (auto& [name, g] : grads) g = Tensor(DType::kFloat, weights.at(name).shape());
    gradsStale = false;
  }
  return grads;
}

Result<StepResult> Trainer::Impl::evalBatch(const Batch& b, MetricAccumulator& acc) {
  DW_RETURN_IF_ERROR(checkBatch(b));
  DW_RETURN_IF_ERROR(syncDevice());  // a checkpoint loaded since the last step
  auto out = runOnBatch(*evalSession, b);
  if (!out) return out.status();
  auto& o = out.value();
  StepResult r;
  r.samples = b.size;
  for (const auto& l : meta.losses) {
    auto it = o.find(l);
    if (it != o.end()) r.losses[l] = scalarOf(it->second);
  }
  // Check every statistic before adding any, so a failed step leaves the sums as they were.
  std::vector<std::vector<const Tensor*>> batchStats;
  for (const auto& mi : meta.metrics) {
    auto& st = batchStats.emplace_back();
    const auto sums = acc.find(mi.name);
    for (size_t k = 0; k < mi.stats.size(); ++k) {
      auto it = o.find(mi.stats[k]);
      if (it == o.end())
        return Status::error("the evaluation graph did not produce statistic '" + mi.stats[k] +
                             "' of metric '" + mi.name + "'");
      if (sums != acc.end() && sums->second.sums[k].shape() != it->second.shape())
        return Status::error("metric '" + mi.name + "': statistic '" + mi.stats[k] +
                             "' has shape " + shapeToString(it->second.shape()) +
                             " in this batch but " + shapeToString(sums->second.sums[k].shape()) +
                             " in the accumulated ones; reset the metrics (reset_metrics? of the "
                             "Eval Step) before changing the shape of what it measures");
      st.push_back(&it->second);
    }
  }
  for (size_t i = 0; i < meta.metrics.size(); ++i) {
    const auto& mi = meta.metrics[i];
    auto it = o.find(mi.output);
    if (it != o.end()) r.batchMetrics[mi.name] = scalarOf(it->second);
    if (mi.stats.empty()) continue;
    MetricSums& m = acc[mi.name];
    if (m.batches == 0) {
      m.sums.clear();
      for (const Tensor* t : batchStats[i]) m.sums.emplace_back(DType::kDouble, t->shape());
    }
    for (size_t k = 0; k < batchStats[i].size(); ++k) {
      const Tensor& t = *batchStats[i][k];
      double* d = m.sums[k].data<double>();
      for (int64_t e = 0; e < t.size(); ++e) d[e] += t.getDouble(e);
    }
    ++m.batches;
  }
  for (const auto& p : params)
    if (p.reg.active()) {
      DW_RETURN_IF_ERROR(syncHost());
      const Tensor& w = weights.at(p.name);
      r.regularization += p.reg.penalty(w.data<float>(), w.size());
    }
  return r;
}

Result<std::map<std::string, double>> Trainer::Impl::finalizeMetrics(
    const MetricAccumulator& acc) const {
  std::map<std::string, double> values;
  for (size_t i = 0; i < meta.metrics.size(); ++i) {
    const auto& mi = meta.metrics[i];
    auto it = acc.find(mi.name);
    if (it == acc.end() || it->second.batches == 0) continue;
    std::map<std::string, Tensor> in;
    for (size_t k = 0; k < mi.stats.size(); ++k) {
      const Tensor& sum = it->second.sums[k];
      Tensor f(DType::kFloat, sum.shape());
      const double* d = sum.data<double>();
      float* p = f.data<float>();
      for (int64_t e = 0; e < sum.size(); ++e) p[e] = static_cast<float>(d[e]);
      in.emplace(mi.stats[k], std::move(f));
    }
    auto out = finalizers[i]->run(in);
    if (!out) return out.status().withContext("finalize of metric '" + mi.name + "'");
    auto v = out->find(mi.output);
    if (v == out->end())
      return Status::error("finalize of metric '" + mi.name + "' did not produce '" + mi.output +
                           "'");
    values[mi.name] = scalarOf(v->second);
  }
  return values;
}

Result<StepResult> Trainer::Impl::evalStep(const Batch& b, bool reset) {
  if (reset) evalSums.clear();
  auto r = evalBatch(b, evalSums);
  if (!r) return r;
  auto m = finalizeMetrics(evalSums);
  if (!m) return m.status();
  r->metrics = std::move(m.value());
  return r;
}

Result<StepResult> Trainer::Impl::evaluate(const Dataset& d, int64_t batchSize) {
  StepResult total;
  MetricAccumulator acc;  // this pass only: the Eval Step sums stay as they are
  const int64_t n = d.size();
  // Under data parallelism each process evaluates its share, and the sums are added up.
  const bool shard = distributed() && n >= comm->size();
  const int64_t first = shard ? n * comm->rank() / comm->size() : 0;
  const int64_t last = shard ? n * (comm->rank() + 1) / comm->size() : n;
  // A fixed-batch model is evaluated in its own batch size, the samples short of a last whole
  // batch left out (as training leaves them).
  if (fixedBatch) batchSize = fixedBatch;
  std::vector<int64_t> idx;
  for (int64_t begin = first; begin < last; begin += batchSize) {
    const int64_t end = std::min(last, begin + batchSize);
    if (fixedBatch && end - begin < fixedBatch) break;
    idx.clear();
    for (int64_t i = begin; i < end; ++i) idx.push_back(i);
    Dataset part = d.gather(idx);
    Batch b;
    b.inputs = std::move(part.columns);
    b.size = end - begin;
    auto r = evalBatch(b, acc);
    if (!r) return r.status();
    for (const auto& [k, v] : r->losses) total.losses[k] += v * static_cast<double>(b.size);
    total.regularization = r->regularization;
    total.samples += b.size;
  }
  if (shard) DW_RETURN_IF_ERROR(reduceEvaluation(total, acc));
  if (fixedBatch && total.samples == 0 && n > 0)
    return Status::error("the evaluation data has " + std::to_string(n) +
                         " samples, fewer than the " + std::to_string(fixedBatch) +
                         " that input '" + fixedInput +
                         "' takes in each batch: make its batch dimension free (N in "
                         "the Input's type)");
  if (total.samples > 0)
    for (auto& [k, v] : total.losses) v /= static_cast<double>(total.samples);
  auto m = finalizeMetrics(acc);
  if (!m) return m.status();
  total.metrics = std::move(m.value());
  return total;
}

Status Trainer::Impl::checkFixedBatch(int64_t size) const {
  if (!fixedBatch || size == fixedBatch) return Status();
  return Status::error("input '" + fixedInput + "' takes batches of exactly " +
                       std::to_string(fixedBatch) + " samples, not " + std::to_string(size) +
                       ": train with a batch size of " + std::to_string(fixedBatch) +
                       ", or make its batch dimension free (N in the Input's type)");
}

Result<FitReport> Trainer::Impl::fit(const FitOptions& fo, const FitCallbacks& cb,
                                     const std::atomic<bool>* cancel) {
  if (!fo.train || fo.train->size() == 0)
    return Status::error("fit: no training data (set the dataset in the training section)");
  DW_RETURN_IF_ERROR(fo.train->validate());
  DW_RETURN_IF_ERROR(checkLabels(fo.train->columns, "the training data", &fo.train->origin));
  if (fo.test)
    DW_RETURN_IF_ERROR(
        checkLabels(fo.test->columns, "the held-out data (validation or test)", &fo.test->origin));
  if (fo.batchSize < 1) return Status::error("fit: batch size must be >= 1");
  DW_RETURN_IF_ERROR(checkFixedBatch(fo.batchSize).withContext("fit"));
  if (fo.accumulationSteps < 1) return Status::error("fit: accumulation steps must be >= 1");
  std::shared_ptr<const Dataset> train = fo.train, test = fo.test;
  if (!test && fo.validationSplit > 0) {
    if (fo.validationSplit >= 1) return Status::error("fit: validation split must be < 1");
    // The same held-out samples as loadData's validation fraction (data_source.h).
    const SplitIndices split =
        splitIndices(train->size(), fo.validationSplit, 0, sampleClasses(*train));
    if (!split.validation.empty() && !split.train.empty()) {
      test = std::make_shared<Dataset>(train->gather(split.validation));
      train = std::make_shared<Dataset>(train->gather(split.train));
    }
  }
  if (test) DW_RETURN_IF_ERROR(test->validate());
  LoaderOptions lo;
  lo.batchSize = fo.batchSize;
  lo.shuffle = fo.shuffle;
  // A fixed-batch model cannot take a smaller last batch: it is left out, as dropLast does.
  lo.dropLast = fo.dropLast || fixedBatch > 0;
  lo.seed = opt.seed;
  lo.hostBuffers = batchStorage();
  BatchLoader loader(train, lo);
  int64_t perEpoch = loader.batchesPerEpoch();
  // Every rank starts from rank 0's model and place in the data, and reads the same batches in
  // the same order (the loader's seed is shared), training on its slice of each.
  const bool dp = distributed();
  if (dp) {
    if (fixedBatch)
      return Status::error("fit: input '" + fixedInput + "' takes batches of exactly " +
                           std::to_string(fixedBatch) +
                           " samples, which processes cannot share: make its batch dimension "
                           "free (N in the Input's type) to train across processes");
    if (fo.batchSize < comm->size())
      return Status::error("fit: a batch of " + std::to_string(fo.batchSize) +
                           " samples cannot be shared by " + std::to_string(comm->size()) +
                           " processes: use a batch size of at least the process count");
    if (!summedLosses.empty() && !averagedLosses.empty())
      return Status::error(
          summedLosses.front() + " sums its loss over the batch and " + averagedLosses.front() +
          " averages: distributed training adds the processes' gradients of a sum as they are "
          "and weights an average's by each process's share, not both; give them one "
          "reduction");
    DW_RETURN_IF_ERROR(broadcastFromRoot());
  }
  bool stopAll = false;
  // A checkpoint that stopped mid-epoch counts that epoch's batches in its own batch size: in
  // another one they start where its samples end, or the run says why they cannot (a batch of
  // 128 after 379 of 64 skipped 24,256 samples in silence).
  if (counters.batchInEpoch > 0 && batchSize > 0 && batchSize != fo.batchSize) {
    const int64_t done = counters.batchInEpoch * batchSize;
    if (done % fo.batchSize != 0)
      return Status::error(
          "fit: training stopped in epoch " + std::to_string(counters.epoch + 1) + " after " +
          std::to_string(done) + " samples (" + std::to_string(counters.batchInEpoch) +
          " batches of " + std::to_string(batchSize) + "), where batches of " +
          std::to_string(fo.batchSize) + " cannot start; resume with a batch size of " +
          std::to_string(batchSize) + " (or one that divides " + std::to_string(done) +
          "), or from an epoch's end");
    counters.batchInEpoch = done / fo.batchSize;
  }
  batchSize = fo.batchSize;
  if (fo.maxStepsPerEpoch > 0) perEpoch = std::min(perEpoch, fo.maxStepsPerEpoch);
  // A last batch smaller than the process count is known now: refused before the first epoch
  // instead of after it (a user trial waited through 2,000 steps for this error).
  if (dp && perEpoch == loader.batchesPerEpoch() && !lo.dropLast) {
    const int64_t last = train->size() % fo.batchSize;
    if (last > 0 && last < comm->size())
      return Status::error(
          "fit: the last batch of every epoch would hold " + std::to_string(last) + " samples (" +
          std::to_string(train->size()) + " in batches of " + std::to_string(fo.batchSize) +
          "), fewer than the " + std::to_string(comm->size()) +
          " processes: choose a batch size that leaves a larger remainder, or fewer processes");
  }

  // A decaying schedule given no length (the studio's Schedule box sets only its kind) decays
  // over this fit: what is left of it, in optimizer steps. It was a constant rate.
  ScheduleConfig& schedule = opt.optimizer.schedule;
  struct Restore {
    ScheduleConfig& s;
    ScheduleConfig saved;
    ~Restore() { s = saved; }
  } restore{schedule, schedule};
  if ((schedule.type == "cosine" || schedule.type == "warmup_linear") && schedule.totalSteps == 0)
    schedule.totalSteps =
        counters.optimizerSteps +
        std::max<int64_t>(1, ((fo.epochs - counters.epoch) * perEpoch - counters.batchInEpoch) /
                                 fo.accumulationSteps);

  // The rate as the user set it, and where a schedule has taken it (a trial's lr 10 under a
  // cosine was named "0 now", the end of the decay).
  auto rateText = [&] {
    auto text = [](double v) {  // 0.001 and 500, not std::to_string's 0.001000
      char b[32];
      std::snprintf(b, sizeof b, "%.6g", v);
      return std::string(b);
    };
    const double now = scheduledLr(opt.optimizer.schedule, baseLr, counters.optimizerSteps);
    return now == baseLr ? "lr " + text(baseLr)
                         : "lr " + text(baseLr) + ", which the " + opt.optimizer.schedule.type +
                               " schedule has taken to " + text(now);
  };
  FitReport report;
  using Clock = std::chrono::steady_clock;
  // The epoch's training metrics: each batch's value weighted by its samples (exact for
  // accuracies; batches before a resume are not in it).
  std::map<std::string, double> metricSums;
  int64_t metricSamples = 0;
  double firstLoss = -1;  // the fit's first batch loss, for the divergence warning
  while (counters.epoch < fo.epochs) {
    metricSums.clear();
    metricSamples = 0;
    if (counters.batchInEpoch == 0) {
      epochLossSum = 0;
      epochSamples = 0;
      epochSeconds = 0;
    }
    loader.startEpoch(counters.epoch, counters.batchInEpoch);
    const double waitedBefore = dp ? comm->waitSeconds() : 0.0;
    sumMarks.clear();
    const auto start = Clock::now();
    const double secondsBefore = epochSeconds;
    while (counters.batchInEpoch < perEpoch) {
      // Processes stop together, after the step where one of them was asked to (reduceStep),
      // so none is left waiting for the others' gradients.
      if (cancel && (dp ? stopAll : cancel->load())) {
        epochSeconds = secondsBefore + std::chrono::duration<double>(Clock::now() - start).count();
        report.cancelled = true;
        return report;
      }
      auto batch = loader.next();
      if (!batch) break;
      gradScale = 1.0;
      const int64_t globalSamples = batch->size;
      // Whether this step ends in an optimizer step: then its sums can overlap its backward
      // pass.
      overlapSum = dp && opt.overlap && counters.accumulated + 1 >= fo.accumulationSteps;
      gradientsSummed = false;
      if (dp) {
        // Rank r's contiguous slice; its gradient counts for its share of the batch.
        const int64_t p = comm->size(), rank = comm->rank();
        const int64_t begin = globalSamples * rank / p, end = globalSamples * (rank + 1) / p;
        if (end == begin)
          return Status::error(
              "fit: the last batch of epoch " + std::to_string(counters.epoch + 1) + " holds " +
              std::to_string(globalSamples) + " samples, fewer than the " + std::to_string(p) +
              " processes: choose a batch size that "
              "leaves a larger remainder, or fewer processes");
        Dataset slice = Dataset{std::move(batch->inputs)}.slice(begin, end);
        batch->inputs = std::move(slice.columns);
        batch->size = end - begin;
        gradWeight = summedLosses.empty()
                         ? static_cast<double>(end - begin) / static_cast<double>(globalSamples)
                         : 1.0;
        sampleOffset = begin;
      }
      auto r = trainStep(*batch);
      gradWeight = 1.0;
      sampleOffset = 0;
      overlapSum = false;
      if (!r)
        return r.status().withContext("epoch " + std::to_string(counters.epoch + 1) + ", batch " +
                                      std::to_string(counters.batchInEpoch + 1));
      if (dp) {
        auto stop = reduceStep(*r, globalSamples, cancel && cancel->load());
        if (!stop)
          return stop.status().withContext("epoch " + std::to_string(counters.epoch + 1) +
                                           ", batch " + std::to_string(counters.batchInEpoch + 1));
        stopAll = stop.value();
      }
      // A NaN or infinite loss does not come back (its gradients carry it into every weight),
      // so fit stops before this step's update instead of reporting "loss nan" for the rest.
      // Every process sees the same (summed) loss and stops at the same step.
      if (!std::isfinite(r->totalLoss()))
        return Status::error(
            "training diverged at epoch " + std::to_string(counters.epoch + 1) + ", batch " +
            std::to_string(counters.batchInEpoch + 1) + ": the loss is " +
            (std::isnan(r->totalLoss()) ? "NaN" : "infinite") + ". Lower the learning rate (" +
            rateText() +
            "), clip the gradients' norm (clip_norm), or check the data for NaN or infinite "
            "values; the weights may hold NaN now, so " +
            (fo.checkpointDir.empty() ? std::string("start again from fresh weights")
                                      : "resume from the last checkpoint (" + fo.checkpointDir +
                                            ")"));
      if (firstLoss < 0 && r->totalLoss() > 0) firstLoss = r->totalLoss();
      ++counters.batchInEpoch;
      const bool lastOfEpoch = counters.batchInEpoch >= perEpoch;
      if (counters.accumulated >= fo.accumulationSteps || lastOfEpoch) {
        gradScale = 1.0 / static_cast<double>(counters.accumulated);
        if (dp && !gradientsSummed) DW_RETURN_IF_ERROR(sumGradients());
        Status st = optimizerStep();
        gradScale = 1.0;
        if (!st.ok()) return st;
        if (dp) DW_RETURN_IF_ERROR(broadcastStatistics());
        resetGrad();
        r->gradNorm = lastGradNorm;
        r->lr = lastLr;
      }
      epochLossSum += r->totalLoss() * static_cast<double>(r->samples);
      epochSamples += r->samples;
      for (const auto& [name, v] : r->batchMetrics)
        metricSums[name] += v * static_cast<double>(r->samples);
      metricSamples += r->samples;
      if (cb.onStep) {
        StepInfo si;
        si.epoch = counters.epoch;
        si.batch = counters.batchInEpoch - 1;
        si.batchesPerEpoch = perEpoch;
        si.samplesDone = epochSamples;
        si.seconds = secondsBefore + std::chrono::duration<double>(Clock::now() - start).count();
        si.result = std::move(r.value());
        cb.onStep(si);
      }
    }
    epochSeconds = secondsBefore + std::chrono::duration<double>(Clock::now() - start).count();
    EpochReport er;
    er.epoch = counters.epoch;
    er.trainLoss = epochSamples > 0 ? epochLossSum / static_cast<double>(epochSamples) : 0;
    for (const auto& [name, sum] : metricSums)
      er.trainMetrics[name] = sum / static_cast<double>(std::max<int64_t>(1, metricSamples));
    er.seconds = epochSeconds;
    er.samplesPerSecond = epochSeconds > 0 ? static_cast<double>(epochSamples) / epochSeconds : 0;
    // A loss that stays finite but grows by orders of magnitude is divergence too, short of
    // the NaN that stops fit: say so while the weights can still be saved.
    if (firstLoss > 0 && er.trainLoss > kDivergingGrowth * firstLoss) {
      auto shortly = [](double v) {
        char b[32];
        std::snprintf(b, sizeof b, "%.4g", v);
        return std::string(b);
      };
      er.warning = "the mean training loss grew from " + shortly(firstLoss) + " (first batch) to " +
                   shortly(er.trainLoss) + ": training is diverging. Lower the learning rate (" +
                   rateText() + ") or clip the gradients' norm (clip_norm)";
    }
    if (dp) {
      er.waitSeconds = comm->waitSeconds() - waitedBefore;
      DW_RETURN_IF_ERROR(splitWait(er));
    }
    if (test && test->size() > 0) {
      auto ev = evaluate(*test, std::max<int64_t>(fo.batchSize, 256));
      if (!ev)
        return ev.status().withContext("evaluating epoch " + std::to_string(counters.epoch + 1));
      er.hasTest = true;
      er.testLoss = ev->totalLoss();
      er.testMetrics = ev->metrics;
      for (const auto& mi : meta.metrics)
        if (isAccuracy(mi) && er.testAccuracy < 0) er.testAccuracy = ev->metrics[mi.name];
    }
    ++counters.epoch;
    counters.batchInEpoch = 0;
    er.steps = counters.optimizerSteps;
    er.trainSteps = counters.trainSteps;
    history.push_back(er);
    if (!fo.checkpointDir.empty() && (!dp || comm->rank() == 0))
      DW_RETURN_IF_ERROR(save(fo.checkpointDir));
    if (cb.onEpoch) cb.onEpoch(er);
    report.epochs.push_back(std::move(er));
  }
  return report;
}

// ---- Trainer ---------------------------------------------------------------------------------

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;

Result<std::unique_ptr<Trainer>> Trainer::create(const Graph& graph, const TrainOptions& options) {
  ExportOptions eo;
  eo.model = options.model;
  eo.withLosses = true;
  auto m = exportOnnx(graph, eo);
  if (!m) return m.status();
  eo.withLosses = false;
  auto inf = exportOnnx(graph, eo);
  if (!inf) return inf.status();
  auto impl = std::make_unique<Impl>();
  impl->inference = std::move(inf.value());
  // How the losses reduce over the batch, for data parallelism: averages are weighted by each
  // process's share, sums added as they are.
  for (const auto& [id, n] : graph.nodes()) {
    if (n.type != "Output Train" && n.domain != "deepwire.losses") continue;
    auto r = n.params.find("reduction");
    const bool sum =
        r != n.params.end() && r->second.type == ParamType::String && r->second.asString() == "sum";
    (sum ? impl->summedLosses : impl->averagedLosses).push_back(graph.describe(id));
  }
  DW_RETURN_IF_ERROR(impl->init(options, std::move(m.value())));
  return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
}

size_t Trainer::bufferAllocations() const {
  return impl_->trainSession->allocationCount() + impl_->evalSession->allocationCount();
}

size_t Trainer::replayedSteps() const {
  return impl_->trainSession->replays();
}

std::string Trainer::notRecorded() const {
  return impl_->trainSession->notRecorded();
}

std::function<std::shared_ptr<Buffer>(size_t)> Trainer::batchStorage() const {
  return impl_->batchStorage();
}

void Trainer::setProfiling(bool on) {
  impl_->trainSession->setProfiling(on);
}

std::string Trainer::profileReport() const {
  return impl_->trainSession->profileReport();
}

Result<StepResult> Trainer::trainStep(const Batch& b) {
  return impl_->trainStep(b);
}
Status Trainer::optimizerStep() {
  impl_->gradScale = 1.0;
  return impl_->optimizerStep();
}
void Trainer::resetGrad() {
  impl_->resetGrad();
}
Result<StepResult> Trainer::fullTrainStep(const Batch& b, bool update) {
  auto r = impl_->trainStep(b);
  if (!r || !update) return r;
  impl_->gradScale = 1.0;
  DW_RETURN_IF_ERROR(impl_->optimizerStep());
  impl_->resetGrad();
  r->gradNorm = impl_->lastGradNorm;
  r->lr = impl_->lastLr;
  return r;
}
Result<StepResult> Trainer::evalStep(const Batch& b, bool resetMetrics) {
  return impl_->evalStep(b, resetMetrics);
}
void Trainer::resetMetrics() {
  impl_->evalSums.clear();
}
Result<std::map<std::string, double>> Trainer::accumulatedMetrics() const {
  return impl_->finalizeMetrics(impl_->evalSums);
}
Result<StepResult> Trainer::evaluate(const Dataset& d, int64_t batchSize) {
  if (batchSize < 1) return Status::error("evaluate: batch size must be >= 1");
  return impl_->evaluate(d, batchSize);
}
Result<FitReport> Trainer::fit(const FitOptions& o, const FitCallbacks& cb,
                               const std::atomic<bool>* cancel) {
  return impl_->fit(o, cb, cancel);
}
Status Trainer::saveCheckpoint(const std::string& dir) const {
  return impl_->save(dir);
}
Status Trainer::loadCheckpoint(const std::string& dir, bool weightsOnly) {
  return impl_->load(dir, weightsOnly);
}
Result<onnx::ModelProto> Trainer::exportInference() const {
  return impl_->exportInference();
}
Result<onnx::ModelProto> Trainer::exportTraining() const {
  return impl_->exportTraining();
}

// Initializer nodes take their trained values by name. Layer weights (running statistics
// included) go back to their layer node as its stored weights, replacing the whole set: the
// export's layout names the layer node, its type and the weight of each initializer.
Status Trainer::writeWeightsTo(Graph& graph) const {
  DW_RETURN_IF_ERROR(impl_->syncHost());
  int written = 0;
  for (const auto& [id, n] : graph.nodes()) {
    if (n.type != "Initializer") continue;
    auto it = impl_->weights.find(n.name);
    if (it == impl_->weights.end()) continue;
    onnx::TensorProto proto;
    tensorToProto(it->second, &proto, n.name);
    DW_RETURN_IF_ERROR(graph.setParam(id, "fill", Param::makeString("values")));
    DW_RETURN_IF_ERROR(graph.setParam(
        id, "values", Param::makeProto(ParamType::Tensor, proto.SerializeAsString())));
    ++written;
  }
  const json layout =
      json::parse(metadataValue(impl_->forward, kLayoutMetadataKey), nullptr, false);
  std::map<NodeId, std::string> layerTypes;
  std::map<NodeId, std::map<std::string, std::string>> layerWeights;
  if (layout.is_object() && layout.contains("layers") && layout["layers"].is_object())
    for (const auto& [base, e] : layout["layers"].items())
      if (e.is_object() && e.contains("id") && e["id"].is_number_integer() && e.contains("type") &&
          e["type"].is_string())
        layerTypes[e["id"].get<NodeId>()] = e["type"].get<std::string>();
  if (layout.is_object() && layout.contains("nodes") && layout["nodes"].is_object())
    for (const auto& [key, e] : layout["nodes"].items()) {
      if (key.rfind("initializer:", 0) != 0 || !e.is_object() || !e.contains("layer") ||
          !e["layer"].is_number_integer() || !e.contains("weight") || !e["weight"].is_string())
        continue;
      auto it = impl_->weights.find(key.substr(12));
      if (it == impl_->weights.end()) continue;
      onnx::TensorProto proto;
      tensorToProto(it->second, &proto);
      layerWeights[e["layer"].get<NodeId>()][e["weight"].get<std::string>()] =
          proto.SerializeAsString();
    }
  for (auto& [id, w] : layerWeights) {
    // Another graph than the one trained: only the same layer at the same id takes them.
    const Node* n = graph.node(id);
    if (!n || !layerTypes.count(id) || layerTypes[id] != n->type) continue;
    DW_RETURN_IF_ERROR(graph.setWeights(id, std::move(w)));
    ++written;
  }
  if (written == 0 && !impl_->weights.empty())
    return Status::error(
        "no Initializer or layer node of the graph matches a trained weight (was the trainer "
        "made from another graph?)");
  return Status();
}

const std::vector<std::string>& Trainer::lossNames() const {
  return impl_->meta.losses;
}
const std::vector<std::string>& Trainer::metricNames() const {
  return impl_->metricNames;
}
const std::vector<std::string>& Trainer::dataInputs() const {
  return impl_->dataInputs;
}
const std::vector<std::string>& Trainer::trainableNames() const {
  return impl_->trainableNames;
}
const std::map<std::string, Tensor>& Trainer::weights() const {
  (void)impl_->syncHost();  // a failed copy leaves the last host values
  return impl_->weights;
}
const std::map<std::string, Tensor>& Trainer::gradients() const {
  return impl_->gradients();
}
const TrainerCounters& Trainer::counters() const {
  return impl_->counters;
}
const std::vector<EpochReport>& Trainer::history() const {
  return impl_->history;
}
const OptimizerConfig& Trainer::optimizerConfig() const {
  return impl_->opt.optimizer;
}
void Trainer::setLearningRate(double lr) {
  impl_->baseLr = lr;
}
double Trainer::baseLearningRate() const {
  return impl_->baseLr;
}
std::string Trainer::notice() const {
  return impl_->notice;
}
Status Trainer::checkLabels(const Dataset& data, const std::string& where) const {
  return impl_->checkLabels(data.columns, where, &data.origin);
}
int Trainer::threads() const {
  return impl_->trainSession->backend().threads();
}

}  // namespace dw::engine::training
