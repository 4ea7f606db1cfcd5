"""One architecture's image of an OCI image index archive (scripts/image.sh's),
its layers unpacked into a directory: how the image tests enter the image."""
import gzip
import io
import json
import tarfile


def unpack(archive, arch, root):
    """The image of arch in the index in archive, its layers unpacked at root."""
    with tarfile.open(archive) as t:
        blob = lambda d: t.extractfile("blobs/sha256/" + d.split(":")[1]).read()  # noqa: E731
        index = json.loads(blob(json.loads(t.extractfile("index.json").read())["manifests"][0]["digest"]))
        entry = next(m for m in index["manifests"] if m["platform"]["architecture"] == arch)
        for layer in json.loads(blob(entry["digest"]))["layers"]:
            data = blob(layer["digest"])
            if layer["mediaType"].endswith("gzip"):
                data = gzip.decompress(data)
            with tarfile.open(fileobj=io.BytesIO(data)) as lt:
                lt.extractall(root)
