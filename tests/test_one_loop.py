"""One training loop: the package's studies step their optimisers through chapter 13's
`training.train` (or its update, `training.train_step`), not loops of their own. Each is checked
against the loop it replaced, kept here as the reference, bit for bit."""
import ast
from pathlib import Path

import torch
import torch.nn.functional as F

from transformer_lib.inside import lookup_task, toy_config, train_toy
from transformer_lib.model import Transformer
from transformer_lib.toy import EOS, PAD
from transformer_lib.training import collate

PACKAGE = Path(__file__).parent.parent / "transformer_lib"


def reference_train_toy(config, train, test, seed, steps, batch_size=64, lr=3e-3) -> float:
    "chapter 19's study as it trained before it went through `training.train`"
    torch.manual_seed(seed)
    net = Transformer(config)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        picks = torch.randint(len(train), (batch_size,), generator=g).tolist()
        batch = collate([train[i] for i in picks])
        logits = net(batch.src, batch.tgt_in)
        loss = F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
    net.eval()
    with torch.no_grad():
        batch = collate(test)
        pred = net(batch.src, batch.tgt_in).argmax(-1)
    entries = (batch.tgt_out != PAD) & (batch.tgt_out != EOS)
    return (pred == batch.tgt_out)[entries].float().mean().item()


def test_train_toy_goes_through_train_and_learns_the_same():
    train, test = lookup_task(n_train=600, n_test=100)
    for seed in (0, 1):
        got = train_toy(toy_config(1, 32), train, test, seed, steps=40)
        assert got == reference_train_toy(toy_config(1, 32), train, test, seed, steps=40)
    # it learns: above chance (1 in 12 symbols) after 150 updates
    assert train_toy(toy_config(1, 32), train, test, 0, steps=150) > 0.15


def test_no_module_but_training_runs_a_training_loop():
    """No `.backward()` outside `training.py` (counting a backward pass's FLOPs passes the method
    without calling it), and no loop outside it that steps an optimiser: a study may wrap the
    optimiser (equal_time.phase_seconds times its step) but `train_step` makes the update."""
    found = []
    for path in sorted(PACKAGE.glob("*.py")):
        if path.name == "training.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr == "backward":
                    found.append(f"{path.name}: {ast.unparse(node)}")
            if isinstance(node, (ast.For, ast.While)):
                for inner in ast.walk(node):
                    if (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute)
                            and inner.func.attr == "step"
                            and "optim" in ast.unparse(inner.func.value)):
                        found.append(f"{path.name}: {ast.unparse(inner)} in a loop")
    assert found == [], found
