"""The thread pool from Python: its size, and the threads jobs run on now."""
import foundry


def test_threads_in_use_follows_the_pool_and_its_load_switch():
    saved = foundry.get_num_threads()
    try:
        foundry.set_num_threads(2)
        foundry.set_pool_adapts_to_load(False)  # whatever else runs: the pool's 2 threads
        assert foundry.get_num_threads() == 2
        x = foundry.randn(256, 256)
        (x @ x).sum().item()
        assert foundry.threads_in_use() == 2
        foundry.set_num_threads(1)
        assert foundry.threads_in_use() == 1
    finally:
        foundry.set_pool_adapts_to_load(True)
        foundry.set_num_threads(saved)
    assert 1 <= foundry.threads_in_use() <= foundry.get_num_threads()
