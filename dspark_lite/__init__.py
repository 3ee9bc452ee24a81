"""dspark_lite: a small, readable reproduction of DSpark (confidence-scheduled speculative
decoding with a semi-autoregressive drafter). Each module's docstring says, in its first lines,
which chapter of the book builds it and which equation, algorithm or section of the paper it
implements.

Two layers. This folder is the method, what a reader of the paper needs, in reading order:

  sampling      probabilities at a temperature, their total variation, draws, the Gumbel-max trick
  speculative   the drafter interface, lossless verification, the rollout loop, Eq. 1
  baselines     target-only sampling and the classic drafter the engine is judged against
  record        the one record of rounds the engine writes and everything else reads
  kvcache       the target's KV cache across transformers versions, and its self-check
  attention     the draft layers' attention over context and block keys/values (Eq. 3)
  hidden_drafter  what drafters reading the target's hidden states share: DrafterConfig, their one
                config, and Eq. 2's projection
  dflash        the parallel DFlash backbone (Eq. 2-3)
  eagle         the EAGLE-3 style autoregressive baseline
  dspark        the Markov / RNN heads and the confidence head (Eq. 4-8)
  training_data  the target's replies, their anchors and the frozen target's view (section 3.3)
  loss          the CE + TV block loss and the confidence BCE (section 3.3, Eq. 8)
  training      the training loop (section 3.3)
  calibration   ECE, AUROC and sequential temperature scaling (section 3.2.1)
  stepcurve     the hardware's step curve SPS(B) that Algorithm 1 reads
  scheduler     Algorithm 1 and the baselines it is measured against (section 3.2.2)
  checks        the validators several modules share (each module checks its own inputs at its door)
  runtime       plumbing both layers use: device, dtype, bf16 autocast and seeds
  progress      the one progress-bar policy (one bar a cell: the outermost)
  resume        interrupt-safe checkpoints and a training's resumable state

The paper's equations, each in one public name, named on its module's first screen:

    Eq. 1        L = (T_draft + T_verify) / tau        `speculative.latency_per_token`
    Eq. 2        H_ctx = RMSNorm(W_c [H(l_1); ...])    `dflash.DFlashDrafter.context_features`
    Eq. 3        attention over context and block     `attention.DraftAttention`
    Eq. 4        p_k = softmax(U_k + B_k), in order   `dspark.sample_chain`
    Eq. 5        the Markov head B_k = W1[x_{k-1}] W2 `dspark.MarkovHead`
    Eq. 6        the RNN head                         `dspark.RNNHead`
    Eq. 7        c_k = sigmoid(w . [h_k; W1[x]] + b)  `dspark.ConfidenceHead`
    Eq. 8        BCE(c_k, 1 - TV) beside CE + TV      `loss.block_loss`
    STS          sequential temperature scaling       `calibration.SequentialTemperatureScaling`
    Algorithm 1  the prefix scheduler                 `scheduler.schedule` (`scheduler.schedule_reference`: line by line)

`dspark_lite.harness` holds what it takes to measure the method, in rooms by concern: `toy` (the
toy world), `serving` (costs, batching, the simulator, the race), `gpu` (chapter 07's path) and
`book` (results on the page, verdict wording, figures). The method never imports the harness.
"""

__version__ = "0.1.0"
