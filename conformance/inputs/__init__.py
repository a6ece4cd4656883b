"""What the suite feeds implementations: shape sets from real models (``shapesets``, the data in
``conformance/shapes/``), the formats' grids and their adversarial values (``numerics``,
``generators``), memory layouts and bit views (``layouts``), hypothesis strategies and profiles
(``strategies``), and deformable attention's cases (``ms_deform_attn_cases``)."""
