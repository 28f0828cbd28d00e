"""The sample set's vocabulary: classes and their definitions, question templates, page size, the release
schema, and the page model (Instance, SamplePage)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

# Public constants

BRAND_LOGO = "Brand Logo"
PHOTOGRAPH = "Photograph"
TABLE = "Table"
CHART = "Chart / Graph"
CLASSES: tuple[str, ...] = (BRAND_LOGO, PHOTOGRAPH, TABLE, CHART)

#: Short class definitions written for the demo, in line with the DocCount paper (section 4.3).
CLASS_DEFINITIONS: dict[str, str] = {
    BRAND_LOGO: (
        "A graphic identity mark of a company, organization, product, service, certification, "
        "award or official programme. Count every separate mark once; a symbol together with the "
        "name lettering that belongs to it is a single logo, and ordinary text that only mentions "
        "a name is not a logo."
    ),
    PHOTOGRAPH: (
        "A camera-made or photorealistic picture of real people, animals, objects, places, "
        "products, scenes or textures, whether it sits in the page as a figure or fills a "
        "background. Count every separate picture once; charts, drawings, logos and tables are "
        "not photographs."
    ),
    TABLE: (
        "Information laid out as a grid of rows and columns (or cells) meant for lookup or "
        "comparison. Count every table once, header row included; its caption and the text "
        "around it are not separate tables."
    ),
    CHART: (
        "A self-contained picture of quantitative or categorical data that encodes values "
        "through position, length, area, angle, colour, points, lines, bars or slices, such as "
        "bar, line, pie and scatter plots. Count every plot panel once; tables and photographs "
        "are not charts."
    ),
}

CLASS_NOUNS: dict[str, str] = {
    BRAND_LOGO: "brand logos",
    PHOTOGRAPH: "photographs",
    TABLE: "tables",
    CHART: "charts or graphs",
}

#: Question phrasings, rotated over the pages. ``{noun}`` is a plural noun phrase for the class,
#: ``{target_class}`` the class name as written in the release.
QUESTION_TEMPLATES: tuple[str, ...] = (
    "How many {noun} appear on this document page?",
    "Count the {noun} in this document image. How many are there?",
    "What is the total number of {target_class} regions on this page?",
    "How many distinct {target_class} instances does this page contain?",
    "Looking at the whole page, how many {noun} can you find?",
    "Determine how many regions of the class {target_class} are present in this document.",
    "How many separate {noun} are shown on the page?",
    "Give the number of {target_class} regions visible in this document page.",
)

PAGE_SIZE = (850, 1100)  # width, height in pixels (US-letter shape, ~100 dpi)
JPEG_QUALITY = 75
DATA_RELATIVE_PATH = Path("data") / "test-00000-of-00001.parquet"

#: The DocCount release schema (see the bundle contract). The image column is the Hugging Face
#: ``Image`` feature as stored in parquet.
IMAGE_STRUCT = pa.struct([pa.field("bytes", pa.binary()), pa.field("path", pa.string())])
RELEASE_SCHEMA = pa.schema(
    [
        pa.field("sample_id", pa.string()),
        pa.field("image", IMAGE_STRUCT),
        pa.field("image_sha256", pa.string()),
        pa.field("target_class", pa.string()),
        pa.field("class_definition", pa.string()),
        pa.field("question", pa.string()),
        pa.field("prompt", pa.string()),
        pa.field("answer", pa.int64()),
    ]
)
HF_FEATURES = {  # the same columns as Hugging Face `datasets` features
    f.name: {"_type": "Image"} if f.name == "image" else {"dtype": str(f.type), "_type": "Value"}
    for f in RELEASE_SCHEMA
}


# Page model


@dataclass(frozen=True)
class Instance:
    """One counted region the generator placed: its class, box ``(x0, y0, x1, y1)`` and kind."""

    target_class: str
    box: tuple[int, int, int, int]
    kind: str


@dataclass(frozen=True)
class SamplePage:
    sample_id: str
    jpeg: bytes
    target_class: str
    question: str
    answer: int
    instances: tuple[Instance, ...] = field(default=())

    @property
    def image_path(self) -> str:
        return f"{self.sample_id}.jpg"
