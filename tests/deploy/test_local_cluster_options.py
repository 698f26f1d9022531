"""deploy/local_cluster.py's options that need no cluster: what --s3 may be combined with."""

import pytest

from deploy.local_cluster import LocalCluster, main


def test_s3_keeps_a_lakes_files_so_it_needs_a_lake(tmp_path, capsys):
    with pytest.raises(ValueError, match="s3=True .* needs lake=True"):
        LocalCluster(tmp_path, lake=False, s3=True)
    with pytest.raises(SystemExit) as exited:  # refused before anything starts
        main(["--root", str(tmp_path / "cluster"), "--s3", "--embedded"])
    assert exited.value.code == 2
    assert "--s3 puts a lake's data files in object storage; --embedded has no lake" in capsys.readouterr().err
    assert not (tmp_path / "cluster").exists()


def test_hosts_refuse_a_documents_folder_inside_the_cluster_folder_they_cannot_see(tmp_path):
    # Each host sees only its own part of the cluster's folder: documents there would be invisible to the workers.
    with pytest.raises(ValueError, match="inside the cluster's folder .* which hosts do not see"):
        LocalCluster(tmp_path, hosts=True, extra_env={"CHUNKYARD_DOCS": str(tmp_path / "docs")})
    LocalCluster(tmp_path / "cluster", hosts=True, extra_env={"CHUNKYARD_DOCS": str(tmp_path / "docs")})  # elsewhere: fine
    LocalCluster(tmp_path, extra_env={"CHUNKYARD_DOCS": str(tmp_path / "docs")})  # one host: it sees everything
