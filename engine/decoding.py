"""The step loop: draft a tree level by level, verify it with one target forward, commit the
accepted path's KV rows, emit a StepEvent. One loop for every method (engine/methods.py).

Per step, with L committed tokens (the last one is the tree's root):
  draft   one forward for the tokens the draft has not seen yet (ends with the root), then one
          batched forward per level for the nodes of that level that get children;
  verify  one target forward over all n tree nodes on a cache of L-1 tokens;
  walk    from the root, children in rank order, until a node rejects all its children;
  commit  both caches keep the prefix + accepted path; the bonus token becomes the next root.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch

from engine import attention, sampling
from engine.errors import UserError
from engine.memory import check_fits
from engine.methods import Method
from engine.models import ModelPair, synced_clock
from engine.settings import Settings
from engine.tree import Tree

ROOT, ACCEPTED, REJECTED, UNREACHED, BONUS = "root", "accepted", "rejected", "unreached", "bonus"

# Prompt tokens per prefill forward. A prompt of 6,500 tokens read in one forward held the worker
# for minutes on a 2-core CPU with no progress and no way to stop it (a helper's walk-through),
# and its attention scores grew with the prompt's square; read in chunks it can be stopped
# between them and says how far it got. Prompts up to this length + 1 (the last token is the
# first step's root) are one forward, as before.
# Not slower: a 2,346-token prompt on the embedded pair read in 47.8 s in chunks, 51.7 s in one.
PREFILL_CHUNK = 256


def prompt_chunks(ids: list[int]) -> list[list[int]]:
    """`ids` in the pieces one cache forward takes (PREFILL_CHUNK tokens each, the last shorter)."""
    return [ids[i:i + PREFILL_CHUNK] for i in range(0, len(ids), PREFILL_CHUNK)]


@dataclass
class NodeRecord:
    index: int
    token_id: int
    text: str
    parent: int          # -1 for the root
    depth: int
    rank: int            # 1-based among siblings, 0 for the root
    draft_prob: float | None   # q(token) at the parent (None at T=0 for unvisited parents)
    target_prob: float | None  # p(token) at the parent; None when the parent was never reached
    status: str


@dataclass
class StepEvent:
    step: int
    method: str
    tree_parents: list[int]
    nodes: list[NodeRecord]           # tree nodes, then the bonus token (status "bonus") if any
    accepted_path: list[int]          # node indices from the root, the root included
    accepted_ranks: list[int]         # rank of each accepted child along the path
    new_token_ids: list[int]
    new_text: str
    draft_seconds: float
    verify_seconds: float
    other_seconds: float
    total_tokens: int
    total_steps: int
    total_seconds: float              # decoding time so far (prefill excluded, reported apart)
    prefill_seconds: float
    text: str                         # all generated text so far
    token_ids: list[int] = field(default_factory=list)
    done: bool = False
    finish_reason: str | None = None  # eos | max_new_tokens | context | stopped
    answer: str | None = None         # last event only: the text without the EOS token that ended it
    planned_parents: list[int] | None = None   # the plan's tree where the context limit cut it (else None)

    @property
    def tokens_per_step(self) -> float:
        return self.total_tokens / self.total_steps if self.total_steps else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.total_tokens / self.total_seconds if self.total_seconds > 0 else 0.0

    @property
    def seconds(self) -> float:
        return self.draft_seconds + self.verify_seconds + self.other_seconds


@dataclass
class _DraftedTree:
    tree: Tree
    tokens: list[int]
    q: dict[int, torch.Tensor]  # draft distribution at each expanded node (sampling modes)
    draft_logits: dict[int, torch.Tensor]
    fed: list[int]              # nodes whose KV the draft computed, in cache order


class Decoder:
    """Holds both caches for one generation. Use `run()` (a generator of StepEvents)."""

    def __init__(self, pair: ModelPair, method: Method, settings: Settings,
                 generator: torch.Generator | None = None,
                 plan: Callable[[], Tree] | None = None, prefilled: tuple | None = None):
        """prefilled: (target cache, draft cache) already holding the prompt but its last token
        (the device profiler's, which has just timed forwards on them): run() skips the prefill."""
        self.pair, self.method, self.settings = pair, method, settings
        self.plan = plan or (lambda: method.tree)
        self.generator = generator or make_generator(pair.device, settings.seed)
        # probabilities are float64, which MPS lacks: do that maths on the CPU there
        self.prob_device = torch.device("cpu") if pair.device.type == "mps" else pair.device
        self.now = synced_clock(pair)  # draft/verify splits honest on CUDA
        self.prefilled = prefilled is not None
        self.target_cache, self.draft_cache = prefilled or (attention.new_cache(pair.target),
                                                             attention.new_cache(pair.draft))
        self.draft_len = 0  # committed tokens held by the draft cache

    # ---------------- public ----------------
    def run(self, prompt_ids: list[int], should_stop: Callable[[], bool] = lambda: False,
            progress: Callable[[float, str], None] | None = None) -> Iterator[StepEvent]:
        """progress(fraction, message): told how far the prefill of a prompt of more than
        PREFILL_CHUNK + 1 tokens got (shorter prompts are one forward and say nothing)."""
        pair, s = self.pair, self.settings
        seq = list(prompt_ids)
        if not seq:
            raise UserError("the prompt is empty")
        if len(seq) >= pair.context_limit:
            raise UserError(f"the prompt has {len(seq)} tokens but the models' context holds {pair.context_limit}; "
                            "shorten the prompt")
        check_fits(pair, min(len(seq) + s.max_new_tokens, pair.context_limit), self.plan().size)
        if should_stop():   # stopped before its turn came (a race prefills its lanes one by one): no prefill
            yield self._final_event({"steps": 0, "seconds": 0.0}, [], "", 0.0, "stopped")
            return
        t0 = self.now()
        if self.prefilled:
            held = (self.target_cache.get_seq_length(), self.draft_cache.get_seq_length())
            if held != (len(seq) - 1, len(seq) - 1):
                raise ValueError(f"prefilled caches hold {held} tokens; the prompt needs {len(seq) - 1}")
            self.draft_len = len(seq) - 1
        elif len(seq) > 1 and not self._prefill(seq[:-1], should_stop, progress):
            yield self._final_event({"steps": 0, "seconds": 0.0}, [], "", self.now() - t0, "stopped")
            return
        prefill = self.now() - t0
        generated: list[int] = []
        totals = {"steps": 0, "seconds": 0.0}
        text = ""
        while True:
            reason = None
            if should_stop():
                reason = "stopped"
            elif len(seq) >= pair.context_limit:
                reason = "context"
            if reason:
                yield self._final_event(totals, generated, text, prefill, reason)
                return
            planned = self.plan()
            tree = self._fitted(planned, len(seq))
            t_caught = self.now()
            if tree.size > 1 and not self._catch_up_draft(seq, should_stop, progress):
                yield self._final_event(totals, generated, text, prefill, "stopped")
                return
            caught_up = self.now() - t_caught
            event_parts = self.step(seq, tree)
            event_parts["draft_seconds"] += caught_up   # the draft's reading is part of drafting
            new_ids, finish = event_parts.pop("new_ids"), event_parts.pop("finish")
            room = s.max_new_tokens - len(generated)
            if len(new_ids) > room:  # whatever ended the step (an EOS too) was cut off
                new_ids, finish = new_ids[:room], "max_new_tokens"
            elif len(new_ids) == room:
                finish = finish or "max_new_tokens"
            seq.extend(new_ids)
            generated.extend(new_ids)
            totals["steps"] += 1
            totals["seconds"] += event_parts["draft_seconds"] + event_parts["verify_seconds"] + event_parts["other_seconds"]
            full = pair.tokenizer.decode(generated, skip_special_tokens=False)
            new_text, text = full[len(text):] if full.startswith(text) else full, full
            answer = None if not finish else (pair.tokenizer.decode(generated[:-1], skip_special_tokens=False)
                                              if finish == "eos" else text)
            yield StepEvent(step=totals["steps"], method=self.method.name, tree_parents=list(tree.parents),
                            new_token_ids=new_ids, new_text=new_text, total_tokens=len(generated),
                            total_steps=totals["steps"], total_seconds=totals["seconds"],
                            prefill_seconds=prefill, text=text, token_ids=list(generated),
                            done=finish is not None, finish_reason=finish, answer=answer,
                            planned_parents=None if tree is planned else list(planned.parents), **event_parts)
            if finish:
                return

    @staticmethod
    def _read_in_chunks(model, cache, chunks, should_stop, after_chunk, stop_before_first: bool = False) -> bool:
        """`model`'s cache takes `chunks`, one forward each, with a Stop looked for between forwards
        (and before the first with `stop_before_first`); `after_chunk(chunk)` after each (a progress
        line). False when a Stop came. The prefill and the draft's catching up both read this way."""
        for i, chunk in enumerate(chunks):
            if (i or stop_before_first) and should_stop():
                return False
            attention.forward_causal(model, cache, chunk)
            after_chunk(chunk)
        return True

    def _prefill(self, ids: list[int], should_stop, progress) -> bool:
        """Both caches take the prompt but its last token (the first step's root), PREFILL_CHUNK
        tokens per forward. False when a Stop came between two forwards."""
        models = [("target", self.pair.target, self.target_cache)]
        if self.method.uses_draft:
            models.append(("draft", self.pair.draft, self.draft_cache))
        chunks = prompt_chunks(ids)
        # how far, with each model's chunks weighed by its parameters (roughly a forward's cost):
        # counted alike, the draft's quick reading was the bar's second half
        weight = {name: max(1, self.pair.parameter_count(name)) for name, _, _ in models} if len(chunks) > 1 else {}
        done, total = 0.0, len(chunks) * sum(weight.values())
        for name, model, cache in models:
            read = 0

            def said(chunk, name=name):
                nonlocal done, read
                read += len(chunk)
                if progress is not None and len(chunks) > 1:
                    done += weight[name]
                    progress(done / total, f"reading the prompt into the {name}: {read:,} of {len(ids):,} tokens")
            if not self._read_in_chunks(model, cache, chunks, should_stop, said, stop_before_first=name != "target"):
                return False
        if self.method.uses_draft:
            self.draft_len = len(ids)
        return True

    def _catch_up_draft(self, seq: list[int], should_stop, progress) -> bool:
        """A plan of one node drafts nothing, so the draft reads nothing; when the plan grows later
        (learning), the draft reads what it lacks but the last token (which the step's draft reads
        for its root) first, in chunks as the prompt is read, with a Stop and a progress line between
        them (a long prompt held the step for seconds with neither). False when a Stop came."""
        chunks = prompt_chunks(seq[self.draft_len:-1])
        first = self.draft_len

        def said(chunk):
            self.draft_len += len(chunk)
            if progress is not None and len(chunks) > 1:
                progress((self.draft_len - first) / (len(seq) - 1 - first),
                         f"catching the draft up on the text so far (the plan grew from one node): "
                         f"{self.draft_len:,} of {len(seq) - 1:,} tokens")
        return self._read_in_chunks(self.pair.draft, self.draft_cache, chunks, should_stop, said)

    def _fitted(self, tree: Tree, length: int) -> Tree:
        """The plan cut to what fits: positions below the context limit. Sliding-window layers
        need no cut: their cache (attention.TreeWindowLayer) keeps what every tree row can see."""
        tree = tree.truncated(self.pair.context_limit - length)
        if max(len(c) for c in tree.children) > self.pair.vocab_size:
            raise UserError(f"a tree node has more children than the vocabulary has tokens ({self.pair.vocab_size})")
        return tree

    # ---------------- one step ----------------
    def step(self, seq: list[int], tree: Tree) -> dict:
        """One draft-verify-commit step on caches that hold seq[:-1] (target) and a prefix of seq
        (draft). Returns the StepEvent fields plus new_ids and finish; seq itself is not changed."""
        t_start = self.now()
        drafted = self._draft(seq, tree)
        t_drafted = self.now()
        base = len(seq) - 1
        visible = attention.tree_visibility(base, tree.ancestor_mask, list(range(tree.size)),
                                            list(range(tree.size)), self.pair.device)
        positions = [base + d for d in tree.depth_of]
        logits = attention.forward(self.pair.target, self.target_cache, drafted.tokens, positions, visible)
        logits = logits.to(self.prob_device)
        t_verified = self.now()
        walk = self._walk(drafted, logits)
        self._commit(base, drafted, walk["path"])
        nodes = self._records(drafted, walk)
        t_end = self.now()
        return {"nodes": nodes, "accepted_path": walk["path"], "accepted_ranks": [tree.rank[i] for i in walk["path"][1:]],
                "draft_seconds": t_drafted - t_start, "verify_seconds": t_verified - t_drafted,
                "other_seconds": t_end - t_verified,
                "new_ids": walk["new_ids"], "finish": walk["finish"]}

    def _draft(self, seq: list[int], tree: Tree) -> _DraftedTree:
        tokens = [seq[-1]] + [0] * (tree.size - 1)
        drafted = _DraftedTree(tree, tokens, {}, {}, [])
        if tree.size == 1:
            return drafted
        draft, greedy = self.pair.draft, self.settings.greedy
        # what the draft lacks: the last token and what the last step's tree left (its bonus); run()
        # has caught it up on anything longer (_catch_up_draft), a caller of step() may not have
        for chunk in prompt_chunks(seq[self.draft_len:]):
            root_logits = attention.forward_causal(draft, self.draft_cache, chunk)
        root_logits = root_logits[-1:]
        self.draft_len = len(seq)
        base = len(seq) - 1
        level_logits = {0: root_logits[0]}
        for level in range(tree.depth - 1):
            expanding = [v for v in tree.levels[level] if tree.children[v]]
            if level > 0 and expanding:
                visible = attention.tree_visibility(base + 1, tree.ancestor_mask, expanding,
                                                    drafted.fed + expanding, self.pair.device)
                out = attention.forward(draft, self.draft_cache, [tokens[v] for v in expanding],
                                        [base + level] * len(expanding), visible)
                drafted.fed.extend(expanding)
                level_logits = dict(zip(expanding, out))
            for v in expanding:
                logits = self._fit_vocab(level_logits[v])
                drafted.draft_logits[v] = logits
                k = len(tree.children[v])
                if greedy:
                    children = sampling.top_tokens(logits, k)
                else:
                    q = sampling.draft_distribution(logits, self.settings.temperature)
                    drafted.q[v] = q
                    draw = (sampling.draw_without_replacement if self.method.sampler == "sequoia"
                            else sampling.draw_with_replacement)
                    children = draw(q, k, self.generator)
                for child, token in zip(tree.children[v], children):
                    tokens[child] = int(token)
        return drafted

    def _fit_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        return fit_vocab(logits, self.pair.vocab_size, self.prob_device)

    def _walk(self, drafted: _DraftedTree, logits: torch.Tensor) -> dict:
        tree, tokens, s = drafted.tree, drafted.tokens, self.settings
        eos = set() if s.ignore_eos else self.pair.eos_ids
        status = {0: ROOT}
        target_p: dict[int, torch.Tensor] = {}
        path, new_ids, finish, node, bonus = [0], [], None, 0, None
        while True:
            kids = list(tree.children[node])
            kid_tokens = [tokens[c] for c in kids]
            if s.greedy:
                best = int(torch.argmax(logits[node]))
                target_p[node] = torch.softmax(logits[node].to(sampling.PROB_DTYPE), -1)
                verdict = sampling.verify_greedy(best, kid_tokens)
            else:
                p = sampling.target_distribution(logits[node], s.temperature, s.top_p, s.top_k)
                target_p[node] = p
                verify = sampling.verify_sequoia if self.method.sampler == "sequoia" else sampling.verify_specinfer
                verdict = (verify(p, drafted.q[node], kid_tokens, self.generator) if kids
                           else sampling.Verdict(accepted=None, residual=p))
            for c, ok in zip(kids, verdict.tried):
                status[c] = ACCEPTED if ok else REJECTED
            if verdict.accepted is None:
                bonus = best if s.greedy else sampling.sample_token(verdict.residual, self.generator)
                new_ids.append(bonus)  # tokens per step = accepted nodes + this one
                if bonus in eos:
                    finish = "eos"
                break
            node = kids[verdict.accepted]
            path.append(node)
            new_ids.append(tokens[node])
            if tokens[node] in eos:
                finish = "eos"  # an accepted EOS ends the generation: no bonus after it
                break
        return {"path": path, "new_ids": new_ids, "finish": finish, "status": status, "target_p": target_p,
                "bonus": bonus}

    def _commit(self, base: int, drafted: _DraftedTree, path: list[int]) -> None:
        attention.commit(self.target_cache, base, [base + i for i in path])
        if not drafted.fed and drafted.tree.size == 1:
            return
        column = {v: base + 1 + j for j, v in enumerate(drafted.fed)}
        kept = [column[v] for v in path[1:] if v in column]
        attention.commit(self.draft_cache, base + 1, kept)
        self.draft_len = base + 1 + len(kept)

    def _records(self, drafted: _DraftedTree, walk: dict) -> list[NodeRecord]:
        tree, tokens = drafted.tree, drafted.tokens
        texts = self.pair.tokenizer.batch_decode([[t] for t in tokens] + [[walk["bonus"] if walk["bonus"] is not None else 0]])
        q_at = {v: drafted.q.get(v) for v in drafted.draft_logits}
        records = []
        for i in range(tree.size):
            parent = tree.parents[i]
            draft_prob = target_prob = None
            if parent >= 0:
                q = q_at.get(parent)
                if q is None and parent in drafted.draft_logits:  # greedy: show the draft's T=1 probability
                    q = torch.softmax(drafted.draft_logits[parent].to(sampling.PROB_DTYPE), -1)
                    q_at[parent] = q
                draft_prob = float(q[tokens[i]]) if q is not None else None
                if parent in walk["target_p"]:
                    target_prob = float(walk["target_p"][parent][tokens[i]])
            records.append(NodeRecord(i, tokens[i], texts[i], parent, tree.depth_of[i], tree.rank[i],
                                      draft_prob, target_prob, walk["status"].get(i, UNREACHED)))
        if walk["bonus"] is not None:
            last = walk["path"][-1]
            p = walk["target_p"].get(last)
            records.append(NodeRecord(tree.size, walk["bonus"], texts[-1], last, tree.depth_of[last] + 1, 0,
                                      None, float(p[walk["bonus"]]) if p is not None else None, BONUS))
        return records

    def _final_event(self, totals, generated, text, prefill, reason) -> StepEvent:
        return StepEvent(step=totals["steps"], method=self.method.name, tree_parents=[-1], nodes=[],
                         accepted_path=[0], accepted_ranks=[], new_token_ids=[], new_text="",
                         draft_seconds=0.0, verify_seconds=0.0, other_seconds=0.0,
                         total_tokens=len(generated), total_steps=totals["steps"], total_seconds=totals["seconds"],
                         prefill_seconds=prefill, text=text, token_ids=list(generated), done=True,
                         finish_reason=reason, answer=text)


def fit_vocab(logits: torch.Tensor, size: int, device: torch.device) -> torch.Tensor:
    """Draft logits (last dim) on the target's vocabulary of `size`: padding the draft lacks gets
    zero mass, rows beyond it are cut. Moved to `device`: the draft may live elsewhere (device maps)."""
    logits = logits.to(device)
    if logits.shape[-1] == size:
        return logits
    if logits.shape[-1] > size:
        return logits[..., :size]
    pad = torch.full((*logits.shape[:-1], size - logits.shape[-1]), float("-inf"), device=logits.device,
                     dtype=logits.dtype)
    return torch.cat([logits, pad], dim=-1)


def make_generator(device: torch.device, seed: int) -> torch.Generator:
    """The run's one source of randomness, on the device where the probabilities live."""
    gen = torch.Generator(device=device if device.type != "mps" else "cpu")
    gen.manual_seed(seed)
    return gen


def generate(pair: ModelPair, prompt_ids: list[int], method: Method, settings: Settings,
             should_stop: Callable[[], bool] = lambda: False, plan: Callable[[], Tree] | None = None,
             generator: torch.Generator | None = None) -> Iterator[StepEvent]:
    """Stream StepEvents for one generation; the last event has done=True and a finish_reason."""
    return Decoder(pair, method, settings, generator=generator, plan=plan).run(prompt_ids, should_stop)


def generate_ids(pair: ModelPair, prompt_ids: list[int], method: Method, settings: Settings,
                 generator: torch.Generator | None = None,
                 should_stop: Callable[[], bool] = lambda: False) -> tuple[list[int], list[StepEvent]]:
    events = list(generate(pair, prompt_ids, method, settings, should_stop=should_stop, generator=generator))
    return events[-1].token_ids, events
