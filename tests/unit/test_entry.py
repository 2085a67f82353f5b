"""Rule entry points find the repository from their own location."""

from types import SimpleNamespace

from zerogate.entry import repo_root


def test_repo_root_resolves_the_unnormalised_scriptdir_snakemake_gives(tmp_path):
    (tmp_path / "workflow/rules").mkdir(parents=True)
    (tmp_path / "workflow/scripts").mkdir()
    snakemake = SimpleNamespace(scriptdir=str(tmp_path / "workflow/rules/../scripts"))
    assert repo_root(snakemake) == tmp_path.resolve()
