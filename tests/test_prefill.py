"""A long prompt is read PREFILL_CHUNK tokens per forward (engine/decoding.py): the output still
equals generate()'s, a Stop lands between two forwards, and the reading says how far it got (a
6,500-token prompt held the worker for minutes with no progress and no way to stop it)."""
import pytest

from engine import attention, decoding, methods
from engine.decoding import Decoder, generate_ids
from engine.models import encode_prompt
from engine.settings import Settings
from engine.tree import Tree
from tests.tiny import WINDOW, greedy_reference, tiny_pair

CHUNK = 7
TOKENS = 24


def long_prompt(pair, length: int) -> list[int]:
    ids = encode_prompt(pair, "the quick brown fox jumps over the lazy dog " * 20, chat=False)[:length]
    assert len(ids) == length
    return ids


def counted_forwards(monkeypatch) -> list[int]:
    """The length of every causal forward (the prefill's), in order."""
    lengths, real = [], attention.forward_causal

    def spy(model, cache, ids):
        lengths.append(len(ids))
        return real(model, cache, ids)
    monkeypatch.setattr(attention, "forward_causal", spy)
    return lengths


@pytest.mark.parametrize("family", ["llama", "gemma3", "mistral"])
def test_a_prompt_read_in_chunks_decodes_as_generate_does(family, monkeypatch):
    """Sliding-window families too: the prompt (3 windows long) is read in chunks shorter than the
    window, each chunk's rows seeing only their own window of the columns read before."""
    monkeypatch.setattr(decoding, "PREFILL_CHUNK", CHUNK)
    pair = tiny_pair(family)
    ids = long_prompt(pair, 3 * WINDOW + 5)
    reference = greedy_reference(pair, ids, TOKENS)
    lengths = counted_forwards(monkeypatch)
    for method in (methods.autoregressive(), methods.sequoia(Tree.from_branching([3, 2, 1, 1, 0, 1]))):
        lengths.clear()
        out, events = generate_ids(pair, ids, method, Settings(max_new_tokens=TOKENS, ignore_eos=True))
        assert out == reference, (family, method.label)
        models = 2 if method.uses_draft else 1
        # prompt but its last token, per model: chunks of CHUNK, then whatever the steps read
        prefill = lengths[:models * -(-(len(ids) - 1) // CHUNK)]
        assert max(prefill) == CHUNK and sum(prefill) == models * (len(ids) - 1), prefill


def test_a_stop_lands_between_two_chunks_and_ends_the_run_before_a_step(monkeypatch):
    monkeypatch.setattr(decoding, "PREFILL_CHUNK", CHUNK)
    pair = tiny_pair("llama")
    ids = long_prompt(pair, 60)
    lengths = counted_forwards(monkeypatch)
    events = list(Decoder(pair, methods.chain(4), Settings(max_new_tokens=8)).run(
        ids, should_stop=lambda: len(lengths) >= 3))
    assert len(lengths) == 3   # the stop was seen before the fourth forward
    assert len(events) == 1 and events[0].finish_reason == "stopped" and events[0].total_steps == 0


def test_the_reading_of_a_long_prompt_says_how_far_it_got(monkeypatch):
    monkeypatch.setattr(decoding, "PREFILL_CHUNK", CHUNK)
    pair = tiny_pair("llama")
    said = []
    decoder = Decoder(pair, methods.chain(4), Settings(max_new_tokens=4))
    list(decoder.run(long_prompt(pair, 30), progress=lambda fraction, message: said.append((fraction, message))))
    fractions = [f for f, _ in said]
    assert len(said) == 2 * 5 and fractions == sorted(fractions) and fractions[-1] == pytest.approx(1.0)   # 29 tokens: 5 chunks
    # each model's share of the bar is its share of the parameters (the draft's was half, read in a
    # fraction of the target's time)
    assert fractions[4] == pytest.approx(0.5), fractions   # the tiny draft is the target's size
    said.clear()
    monkeypatch.setattr(type(pair), "parameter_count", lambda self, role: {"target": 3000, "draft": 1000}[role])
    list(Decoder(pair, methods.chain(4), Settings(max_new_tokens=4)).run(
        long_prompt(pair, 30), progress=lambda fraction, message: said.append((fraction, message))))
    assert [f for f, _ in said][4] == pytest.approx(0.75), said
    assert said[0][1] == "reading the prompt into the target: 7 of 29 tokens"
    assert said[-1][1] == "reading the prompt into the draft: 29 of 29 tokens"
    said.clear()   # a prompt of one chunk is one forward and says nothing
    list(Decoder(pair, methods.chain(4), Settings(max_new_tokens=4)).run(
        long_prompt(pair, CHUNK), progress=lambda fraction, message: said.append(message)))
    assert said == []


def test_a_plan_that_starts_with_one_node_and_grows_catches_the_draft_up_in_chunks(monkeypatch):
    """A Sequoia plan of one node drafts nothing, so the draft reads no prompt; when learning grows
    the plan later, the draft caught up on the whole prompt in one forward (a review found it)."""
    monkeypatch.setattr(decoding, "PREFILL_CHUNK", CHUNK)
    pair = tiny_pair("llama")
    ids = long_prompt(pair, 60)
    reference = greedy_reference(pair, ids, TOKENS)
    lengths = counted_forwards(monkeypatch)
    trees = iter([Tree((-1,))] * 3)
    grown = Tree.from_branching([3, 2, 1, 1, 0, 1])
    decoder = Decoder(pair, methods.sequoia(Tree((-1,))), Settings(max_new_tokens=TOKENS, ignore_eos=True),
                      plan=lambda: next(trees, grown))
    said = []
    events = list(decoder.run(ids, progress=lambda fraction, message: said.append(message)))
    assert events[-1].token_ids == reference
    assert any(len(e.tree_parents) > 1 for e in events)   # it did grow
    assert max(lengths) == CHUNK, lengths
    # the catching up says how far it got, as the prompt's reading does
    one_node = sum(len(e.tree_parents) == 1 for e in events)   # the steps before it grew: their tokens too
    assert said[-1] == ("catching the draft up on the text so far (the plan grew from one node): "
                        f"{len(ids) + one_node - 1} of {len(ids) + one_node - 1} tokens"), said


def test_a_stop_lands_while_the_draft_catches_up_on_a_plan_that_grew(monkeypatch):
    """The draft's catching up (above) ran all its chunks inside a step, with no Stop between them:
    a Stop now lands between two chunks and ends the run before that step."""
    monkeypatch.setattr(decoding, "PREFILL_CHUNK", CHUNK)
    pair = tiny_pair("llama")
    ids = long_prompt(pair, 60)
    stop = {"now": False}
    real = attention.forward_causal

    def spy(model, cache, chunk):   # the draft's first forward is the catching up's first chunk
        stop["now"] = stop["now"] or model is pair.draft
        return real(model, cache, chunk)
    monkeypatch.setattr(attention, "forward_causal", spy)
    trees = iter([Tree((-1,))] * 3)
    decoder = Decoder(pair, methods.sequoia(Tree((-1,))), Settings(max_new_tokens=TOKENS, ignore_eos=True),
                      plan=lambda: next(trees, Tree.from_branching([3, 2, 1, 1, 0, 1])))
    events = list(decoder.run(ids, should_stop=lambda: stop["now"]))
    # (run() asks the plan once before its first step, for the caches' size): two one-node steps
    assert [e.finish_reason for e in events] == [None, None, "stopped"]
    assert events[-1].total_tokens == 2 and decoder.draft_len == CHUNK   # one chunk read, no step drafted


def test_a_step_cut_at_the_context_limit_says_what_was_planned(monkeypatch):
    """Near the context limit the Decoder cuts the plan's tree (Decoder._fitted); the step says what
    was planned, so the page does not take the cut for a change of plan ("its tree changed 4 times")."""
    pair = tiny_pair("llama")
    ids = encode_prompt(pair, "hello world", False)
    monkeypatch.setattr(pair, "context_limit", len(ids) + 6)   # the pair is shared: restored after
    tree = Tree.from_parents([-1, 0, 1, 2, 3])   # a chain of 5 levels
    steps = [e for e in Decoder(pair, methods.sequoia(tree), Settings(max_new_tokens=20, ignore_eos=True)).run(ids)
             if e.nodes]
    cut = [e for e in steps if len(e.tree_parents) < tree.size]
    assert cut and all(e.planned_parents == list(tree.parents) for e in cut)
    assert all(e.planned_parents is None for e in steps if e.tree_parents == list(tree.parents))


def test_a_plan_sent_to_a_running_job_is_counted_as_the_users_change():
    """With learning on, a budget moved mid-run was credited to learning ("learning changed its
    tree 1 time"): the Replanner counts the page's changes apart."""
    from types import SimpleNamespace
    from engine import planning
    pair = tiny_pair("llama")
    eight, four = Tree.from_parents([-1, 0, 0, 1, 1, 2, 3, 4]), Tree.from_parents([-1, 0, 1, 2])
    result = planning.PlanResult(planning.MethodSpec("sequoia", 8, 4), methods.sequoia(eight), None, None, "", True)
    sent = [SimpleNamespace(tree=four, spec=planning.MethodSpec("sequoia", 4, 4))]
    replan = planning.Replanner(pair, result, Settings(), user=lambda: sent.pop() if sent else None, learn=False)
    assert replan() == four and replan() == four
    assert (replan.user_changes, replan.tree_changes) == (1, 0)
